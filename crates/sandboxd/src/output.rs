//! Printing: human tables on a terminal, stable JSON with `--json`, progress on stderr.

use std::io::IsTerminal;
use std::sync::Arc;
use std::time::Duration;

use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};
use indicatif::{ProgressBar, ProgressStyle};
use sandboxd_backend::process::Progress;

use crate::client::Reply;

pub fn table(header: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut table = Table::new();
    table
        .load_preset(UTF8_BORDERS_ONLY)
        .set_header(header.to_vec());
    for row in rows {
        table.add_row(row);
    }
    table.to_string()
}

pub fn json<T: serde::Serialize>(value: &T) -> String {
    serde_json::to_string_pretty(value).expect("our output types always serialize")
}

/// Prints a list answer of the admin API: its JSON with `--json`, else `empty` when it holds
/// nothing, else a table with one `row` per item.
pub fn print_list<T>(
    reply: &Reply<Vec<T>>,
    as_json: bool,
    empty: &str,
    header: &[&str],
    row: impl Fn(&T) -> Vec<String>,
) {
    reply.print(as_json, |items| {
        if items.is_empty() {
            println!("{empty}");
        } else {
            println!("{}", table(header, items.iter().map(row).collect()));
        }
    });
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
