//! How `doctor` is read: which failures matter (a backend the configuration relies on) and
//! which only mean something is not offered, one block per check wrapped to the terminal, and
//! a closing verdict.

use sandboxd_backend::DoctorCheck;
use sandboxd_domain::engines;
use sandboxd_domain::instance::BackendKind;

use crate::config::{BackendChoice, Settings};

/// The width when neither `COLUMNS` nor a terminal says one.
const DEFAULT_WIDTH: usize = 100;
/// Narrower than this, wrapping would leave a word a line; the blocks keep this minimum.
const MIN_WIDTH: usize = 40;

/// The columns to fit: `COLUMNS`, else the terminal stdout is, else [`DEFAULT_WIDTH`].
pub(super) fn width() -> usize {
    let from_env = std::env::var("COLUMNS")
        .ok()
        .and_then(|c| c.trim().parse::<usize>().ok())
        .filter(|c| *c > 0);
    // comfy-table measures the terminal stdout is (crossterm), None when it is none.
    let from_tty = || comfy_table::Table::new().width().map(usize::from);
    from_env
        .or_else(from_tty)
        .unwrap_or(DEFAULT_WIDTH)
        .max(MIN_WIDTH)
}

/// Tags a backend's own checks with it; its engine lines are optional (an engine it cannot run
/// is not offered, the others still are).
pub(super) fn from_backend(kind: BackendKind, checks: Vec<DoctorCheck>) -> Vec<DoctorCheck> {
    let engine_lines: Vec<String> = engines::all()
        .map(|engine| format!("{} ({kind})", engine.name))
        .collect();
    checks
        .into_iter()
        .map(|check| {
            let check = check.on(kind.as_str());
            if engine_lines.contains(&check.subject) {
                check.optional()
            } else {
                check
            }
        })
        .collect()
}

/// Whether a backend's checks all pass, its optional ones aside.
fn usable(checks: &[DoctorCheck], kind: BackendKind) -> bool {
    checks
        .iter()
        .filter(|c| c.backend.as_deref() == Some(kind.as_str()))
        .all(|c| c.ok || !c.required)
}

/// Makes the checks of a backend the configuration does not rely on optional: the one
/// `backend` names is required (with `auto`, process or Docker, whichever works; both when
/// neither does), and Kubernetes whenever it is checked (it is configured then).
pub(super) fn weigh_backends(settings: &Settings, checks: &mut [DoctorCheck]) {
    let relied_on = |kind: BackendKind| match settings.backend {
        BackendChoice::Process => kind == BackendKind::Process,
        BackendChoice::Docker => kind == BackendKind::Docker,
        BackendChoice::Kubernetes => kind == BackendKind::Kubernetes,
        BackendChoice::Auto => {
            kind == BackendKind::Kubernetes
                || !(usable(checks, BackendKind::Process) || usable(checks, BackendKind::Docker))
        }
    };
    let relied: Vec<&'static str> = [
        BackendKind::Process,
        BackendKind::Docker,
        BackendKind::Kubernetes,
    ]
    .into_iter()
    .filter(|kind| relied_on(*kind) || *kind == BackendKind::Kubernetes)
    .map(BackendKind::as_str)
    .collect();
    for check in checks.iter_mut() {
        if let Some(backend) = &check.backend
            && !relied.contains(&backend.as_str())
        {
            check.required = false;
        }
    }
}

/// `ready: process backend; docker backend: 2 optional missing (mongo, postgres features)`,
/// or `NOT READY: 1 required check failing (warm pool postgres); …`.
pub(super) fn verdict(checks: &[DoctorCheck]) -> String {
    let failing: Vec<&str> = checks
        .iter()
        .filter(|c| !c.ok && c.required)
        .map(|c| c.subject.as_str())
        .collect();
    let mut parts = Vec::new();
    let mut backends: Vec<&str> = Vec::new();
    for check in checks {
        if let Some(backend) = check.backend.as_deref()
            && !backends.contains(&backend)
        {
            backends.push(backend);
        }
    }
    for backend in backends {
        let own: Vec<&DoctorCheck> = checks
            .iter()
            .filter(|c| c.backend.as_deref() == Some(backend))
            .collect();
        let broken = own.iter().any(|c| !c.ok && c.required);
        let core_missing = own
            .iter()
            .any(|c| !c.ok && c.subject == format!("{backend} backend"));
        let optional: Vec<String> = own
            .iter()
            .filter(|c| !c.ok && !c.required)
            .map(|c| short_subject(&c.subject, backend))
            .collect();
        parts.push(if broken {
            format!("{backend} backend: not usable")
        } else if core_missing {
            format!("{backend} backend: not available (optional)")
        } else if optional.is_empty() {
            format!("{backend} backend")
        } else {
            format!(
                "{backend} backend: {} optional missing ({})",
                optional.len(),
                optional.join(", ")
            )
        });
    }
    let head = match failing.len() {
        0 => "ready".to_owned(),
        n => format!(
            "NOT READY: {n} required check(s) failing ({})",
            failing.join(", ")
        ),
    };
    format!("{head}: {}", parts.join("; "))
}

/// `mongo (docker)` → `mongo`, `postgres features (docker)` → `postgres features`.
fn short_subject(subject: &str, backend: &str) -> String {
    subject
        .strip_suffix(&format!(" ({backend})"))
        .unwrap_or(subject)
        .to_owned()
}

/// Every check as a block within `width` columns: required checks first, then the optional
/// ones, each `status subject`, its finding and its fix indented below; the verdict last.
pub(super) fn render(checks: &[DoctorCheck], width: usize) -> String {
    let mut out = String::new();
    let groups = [
        ("Required", true),
        ("Optional (missing only means not offered)", false),
    ];
    for (title, required) in groups {
        let group: Vec<&DoctorCheck> = checks.iter().filter(|c| c.required == required).collect();
        if group.is_empty() {
            continue;
        }
        push_wrapped(&mut out, title, "", "  ", width);
        for check in group {
            let head = format!("[{}] {}", check.status(), check.subject);
            push_wrapped(&mut out, &head, "  ", "      ", width);
            push_wrapped(&mut out, &check.detail, "      ", "      ", width);
            if let Some(fix) = &check.fix {
                push_wrapped(
                    &mut out,
                    &format!("fix: {fix}"),
                    "      ",
                    "        ",
                    width,
                );
            }
        }
        out.push('\n');
    }
    push_wrapped(&mut out, &verdict(checks), "", "  ", width);
    out
}

/// Appends `text` wrapped at word boundaries to `width` columns: the first line after `first`,
/// the others after `rest`; a word longer than a line is cut.
fn push_wrapped(out: &mut String, text: &str, first: &str, rest: &str, width: usize) {
    let mut line = first.to_owned();
    let mut empty = true;
    for word in text.split_whitespace() {
        let room = width.saturating_sub(line.chars().count() + usize::from(!empty));
        if !empty && word.chars().count() > room {
            out.push_str(&line);
            out.push('\n');
            line = rest.to_owned();
            empty = true;
        }
        let mut word: Vec<char> = word.chars().collect();
        loop {
            let room = width.saturating_sub(line.chars().count() + usize::from(!empty));
            if word.len() <= room {
                if !empty {
                    line.push(' ');
                }
                line.extend(word);
                empty = false;
                break;
            }
            // Longer than a whole line: cut it, the rest on the next.
            let (now, later) = word.split_at(room.max(1));
            if !empty {
                line.push(' ');
            }
            line.extend(now);
            out.push_str(&line);
            out.push('\n');
            line = rest.to_owned();
            empty = true;
            word = later.to_vec();
        }
    }
    if !empty {
        out.push_str(&line);
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<DoctorCheck> {
        vec![
            DoctorCheck::ok("process backend", "instances under /dev/shm/sandboxd").on("process"),
            DoctorCheck::unavailable(
                "mongo (process)",
                "`mongod` not found",
                "install mongodb-org (MongoDB's own apt repository)",
            )
            .on("process"),
            DoctorCheck::ok("docker backend", "Docker 27.5.1 at /var/run/docker.sock").on("docker"),
            DoctorCheck::unavailable(
                "postgres features (docker)",
                "pg_trgm, hstore from image postgres:16-alpine; missing: vector (agents are \
                 not offered them)",
                "vector: install pgvector in the image, e.g. /var/lib/postgresql/extension/\
                 vector.control-is-a-very-long-path-that-cannot-be-wrapped-at-all-anywhere",
            )
            .on("docker"),
            DoctorCheck::missing("warm pool postgres", "backing off", "fix the cause"),
        ]
    }

    #[test]
    fn every_line_fits_the_width_and_the_verdict_closes() {
        for width in [40, 72, 80, 100, 200] {
            let shown = render(&sample(), width);
            for line in shown.lines() {
                assert!(
                    line.chars().count() <= width,
                    "{width}: {line:?} in\n{shown}"
                );
            }
            // A heading wider than the narrowest width wraps; from 72 it is whole.
            assert!(
                width < 72 || shown.contains("[not available (optional)] mongo (process)"),
                "{shown}"
            );
            assert!(shown.contains("[MISSING] warm pool postgres"), "{shown}");
        }
        assert_eq!(
            verdict(&sample()),
            "NOT READY: 1 required check(s) failing (warm pool postgres): process backend: 1 \
             optional missing (mongo); docker backend: 1 optional missing (postgres features)"
        );
        let ready: Vec<DoctorCheck> = sample().into_iter().take(4).collect();
        assert!(
            verdict(&ready).starts_with("ready: process backend: 1 optional"),
            "{}",
            verdict(&ready)
        );
    }

    #[test]
    fn a_backend_the_configuration_does_not_use_is_optional() {
        let mut checks = vec![
            DoctorCheck::ok("process backend", "fine").on("process"),
            DoctorCheck::missing("docker backend", "no socket", "start Docker").on("docker"),
        ];
        let settings = Settings {
            backend: BackendChoice::Process,
            ..Settings::default()
        };
        weigh_backends(&settings, &mut checks);
        assert!(!checks[1].required);
        assert_eq!(
            verdict(&checks),
            "ready: process backend; docker backend: not available (optional)"
        );
        let mut checks = vec![checks[1].clone().on("docker")];
        checks[0].required = true;
        let settings = Settings {
            backend: BackendChoice::Docker,
            ..Settings::default()
        };
        weigh_backends(&settings, &mut checks);
        assert!(checks[0].required);
        assert!(
            verdict(&checks).starts_with("NOT READY"),
            "{}",
            verdict(&checks)
        );
    }
}
