//! The page shell every panel page shares (head, nav, flash, logout) and the small pieces pages
//! are built from: badges and times (ages are `sandboxd_domain::clock`'s one format). maud
//! escapes every interpolated value.

use maud::{DOCTYPE, Markup, html};

use super::session::{Flash, PanelSession};

/// The nav entries: path and label.
const NAV: &[(&str, &str)] = &[
    ("/settings", "Settings"),
    ("/projects", "Projects"),
    ("/sandboxes", "Sandboxes"),
    ("/pools", "Pools"),
    ("/sources", "Sources"),
    ("/audit", "Audit log"),
];

/// Where a page sits in the nav.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    Settings,
    Projects,
    Sandboxes,
    Pools,
    Sources,
    Audit,
}

impl Section {
    fn path(self) -> &'static str {
        match self {
            Section::Settings => NAV[0].0,
            Section::Projects => NAV[1].0,
            Section::Sandboxes => NAV[2].0,
            Section::Pools => NAV[3].0,
            Section::Sources => NAV[4].0,
            Section::Audit => NAV[5].0,
        }
    }
}

fn head(title: &str) -> Markup {
    html! {
        head {
            meta charset="utf-8";
            meta name="viewport" content="width=device-width, initial-scale=1";
            meta name="color-scheme" content="light dark";
            title { (title) " · sandboxd" }
            link rel="stylesheet" href=(super::STYLESHEET_PATH);
        }
    }
}

/// The form field every POST form carries its CSRF token in.
pub const CSRF_FIELD: &str = "csrf";

/// A hidden CSRF field: every POST form carries one.
pub fn csrf_field(session: &PanelSession) -> Markup {
    html! { input type="hidden" name=(CSRF_FIELD) value=(session.csrf); }
}

pub fn flash(flash: Option<&Flash>) -> Markup {
    html! {
        @if let Some(flash) = flash {
            div class={ "flash " (if flash.ok { "flash-ok" } else { "flash-error" }) } role="status" {
                (flash.text)
            }
        }
    }
}

/// A logged-in page.
pub fn page(
    section: Section,
    title: &str,
    session: &PanelSession,
    flash_message: Option<&Flash>,
    body: Markup,
) -> Markup {
    page_under(section, None, title, session, flash_message, body)
}

/// A logged-in page below another one (`parent`: its path and label, shown before the title).
pub fn page_under(
    section: Section,
    parent: Option<(&str, &str)>,
    title: &str,
    session: &PanelSession,
    flash_message: Option<&Flash>,
    body: Markup,
) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body {
                header class="top" {
                    a class="brand" href="/" { span class="brand-mark" { "◆" } " sandboxd" }
                    nav {
                        @for (path, label) in NAV {
                            a href=(path) class=[(section.path() == *path).then_some("active")] { (label) }
                        }
                    }
                    form class="logout" method="post" action="/logout" {
                        (csrf_field(session))
                        button class="link" type="submit" { "Log out" }
                    }
                }
                main {
                    h1 {
                        @if let Some((path, label)) = parent {
                            a class="parent" href=(path) { (label) } span class="muted" { " / " }
                        }
                        (title)
                    }
                    (flash(flash_message))
                    (body)
                }
                footer {
                    "Admin API: " a href="/v1/openapi.json" { "/v1/openapi.json" }
                    " · Metrics: " a href="/metrics" { "/metrics" }
                }
            }
        }
    }
}

/// A page outside the login (the login form, an error).
pub fn bare(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            (head(title))
            body class="bare" {
                main class="narrow" { (body) }
            }
        }
    }
}

/// A colored label. `tone`: `ok`, `warn`, `bad`, `off`, `info`.
pub fn badge(tone: &str, text: &str) -> Markup {
    html! { span class={ "badge badge-" (tone) } { (text) } }
}

pub fn on_off(value: bool) -> Markup {
    if value {
        badge("ok", "on")
    } else {
        badge("off", "off")
    }
}

/// A sandbox or instance status as a badge.
pub fn status(value: &str) -> Markup {
    let tone = match value {
        "live" | "running" | "ok" => "ok",
        "degraded" | "starting" | "restarting" => "warn",
        "dead" | "exited" | "failed" => "bad",
        _ => "info",
    };
    badge(tone, value)
}

/// An audit outcome as a badge.
pub fn outcome(value: &str) -> Markup {
    if value == "ok" {
        badge("ok", value)
    } else {
        badge("bad", value)
    }
}

/// A time as `2026-11-30 14:05:09` UTC.
pub fn time(at_ms: i64) -> String {
    let format = time::macros::format_description!("[year]-[month]-[day] [hour]:[minute]:[second]");
    time::OffsetDateTime::from_unix_timestamp_nanos(i128::from(at_ms) * 1_000_000)
        .ok()
        .and_then(|t| t.format(&format).ok())
        .unwrap_or_else(|| at_ms.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_well() {
        assert_eq!(time(0), "1970-01-01 00:00:00");
        assert_eq!(time(1_500), "1970-01-01 00:00:01");
    }

    #[test]
    fn interpolated_text_is_escaped() {
        let markup = badge("ok", "<script>alert(1)</script>").into_string();
        assert!(!markup.contains("<script>"), "{markup}");
        assert!(markup.contains("&lt;script&gt;"), "{markup}");
    }
}
