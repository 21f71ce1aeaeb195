//! Printing: human tables on a terminal, stable JSON with `--json`, progress on stderr.

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::Duration;

use comfy_table::{ContentArrangement, Table, presets::UTF8_BORDERS_ONLY};
use indicatif::{ProgressBar, ProgressStyle};
use sandboxd_backend::process::Progress;

/// A table for stdout: wrapped to the terminal's width on a terminal, one line per row when
/// piped (so `grep` and `wc -l` see whole rows).
pub fn table(header: &[&str], rows: Vec<Vec<String>>) -> String {
    render_table(header, rows, terminal_width())
}

/// A table within `max` columns, or the terminal's width when narrower: cells wrap, terminal
/// or not (a listing that must fit a width whatever reads it).
pub fn table_within(header: &[&str], rows: Vec<Vec<String>>, max: u16) -> String {
    let width = terminal_width().map_or(max, |w| w.min(max));
    render_table(header, rows, Some(width))
}

/// The width of the terminal stdout is, if it is one (a table with no width set measures it).
fn terminal_width() -> Option<u16> {
    Table::new().width()
}

/// Renders a table within `width` columns (cells wrap, longest columns first), or unwrapped with
/// every cell on one line when there is no width.
fn render_table(header: &[&str], rows: Vec<Vec<String>>, width: Option<u16>) -> String {
    let mut table = Table::new();
    table
        .load_preset(UTF8_BORDERS_ONLY)
        .force_no_tty()
        .set_header(header.to_vec());
    match width {
        Some(width) => {
            table
                .set_content_arrangement(ContentArrangement::Dynamic)
                .set_width(width);
            for row in rows {
                table.add_row(row);
            }
        }
        None => {
            for row in rows {
                table.add_row(row.into_iter().map(|cell| one_line(&cell)));
            }
        }
    }
    table.to_string()
}

fn one_line(cell: &str) -> String {
    cell.split_whitespace().collect::<Vec<_>>().join(" ")
}

pub fn json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string_pretty(value).expect("our output types always serialize")
}

/// A progress reporter: a spinner on a terminal, plain lines otherwise; both on stderr so
/// `--json` output on stdout stays parseable.
pub fn progress() -> (Progress, Option<ProgressBar>) {
    if std::io::stderr().is_terminal() {
        let bar = ProgressBar::new_spinner();
        bar.set_style(
            ProgressStyle::with_template("{spinner} {msg} {elapsed}")
                .expect("the template is a constant"),
        );
        bar.enable_steady_tick(Duration::from_millis(100));
        let shown = bar.clone();
        (
            Arc::new(move |message: &str| shown.set_message(message.to_owned())),
            Some(bar),
        )
    } else {
        (Arc::new(|message: &str| eprintln!("{message}")), None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> Vec<Vec<String>> {
        let long = "install the package postgresql-17 and its contrib modules, then run \
                    sandboxd doctor again to see whether the backend found them"
            .to_owned();
        vec![
            vec!["ok".into(), "postgres (process)".into(), long.clone(), long],
            vec![
                "MISSING".into(),
                "mongo".into(),
                "no mongod\non PATH".into(),
                "".into(),
            ],
        ]
    }

    #[test]
    fn wraps_every_line_to_the_width() {
        for width in [40u16, 60, 80, 120] {
            let rendered = render_table(&["", "what", "found", "fix"], rows(), Some(width));
            for line in rendered.lines() {
                assert!(
                    line.chars().count() <= usize::from(width),
                    "{width}: {line:?} in\n{rendered}"
                );
            }
            assert!(
                rendered.contains("ok") && rendered.contains("MISSING"),
                "{rendered}"
            );
        }
    }

    #[test]
    fn without_a_width_every_row_is_one_line() {
        let rendered = render_table(&["", "what", "found", "fix"], rows(), None);
        // Top border, header, separator, two rows, bottom border.
        assert_eq!(rendered.lines().count(), 6, "{rendered}");
        assert!(
            rendered
                .lines()
                .any(|line| line.contains("MISSING") && line.contains("no mongod on PATH")),
            "{rendered}"
        );
        assert!(
            rendered.lines().any(|l| l.chars().count() > 200),
            "unwrapped"
        );
    }
}
