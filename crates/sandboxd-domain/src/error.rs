//! Errors for input that does not fit the vocabulary. Messages name what is allowed and never echo
//! the caller's text unescaped (see [`quote`]).

/// A caller's mistake, detected before anything is created.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InputError {
    #[error("invalid {kind} {value}: {rule}")]
    InvalidName {
        kind: &'static str,
        value: String,
        rule: &'static str,
    },
    #[error("unknown engine {given}; allowed: {allowed}")]
    UnknownEngine { given: String, allowed: String },
    #[error("feature {given} is not allowed for {engine}; allowed: {allowed}")]
    FeatureNotAllowed {
        engine: &'static str,
        given: String,
        allowed: String,
    },
    #[error("malformed {what}: {detail}")]
    Malformed { what: &'static str, detail: String },
}

/// Renders untrusted text for an error message: escaped (control characters, quotes, non-ASCII,
/// and markup brackets, so no consumer can render it as HTML), quoted, and cut to a length that
/// cannot flood a log line.
pub fn quote(untrusted: &str) -> String {
    quote_up_to(untrusted, 64)
}

/// [`quote`] with room for `max_chars`: a cut falls between words where one ends in the last
/// quarter, so what is shown never ends mid-word when it need not.
pub fn quote_up_to(untrusted: &str, max_chars: usize) -> String {
    let mut shown: String = untrusted.chars().take(max_chars).collect();
    let cut = shown.len() < untrusted.len();
    if cut
        && let Some(space) = shown.rfind(char::is_whitespace)
        && shown[..space].chars().count() >= max_chars * 3 / 4
    {
        shown.truncate(space);
    }
    shown = shown
        .escape_default()
        .to_string()
        .replace('<', "\\u{3c}")
        .replace('>', "\\u{3e}")
        .replace('&', "\\u{26}");
    if cut {
        format!("\"{shown}\"…")
    } else {
        format!("\"{shown}\"")
    }
}

/// Joins allowed values for an error message, or says there are none.
pub fn allowed_list<'a>(values: impl IntoIterator<Item = &'a str>) -> String {
    let list: Vec<&str> = values.into_iter().collect();
    if list.is_empty() {
        "none".to_owned()
    } else {
        list.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quote_escapes_control_characters_and_markup() {
        let shown = quote("x\n<script>\u{1b}[31m");
        assert!(!shown.contains('\n'));
        assert!(!shown.contains('\u{1b}'));
        assert!(!shown.contains('<') && !shown.contains('>'), "{shown}");
        assert!(shown.starts_with('"'));
    }

    #[test]
    fn a_longer_quote_cuts_between_words() {
        let text = format!(
            "unknown field `x`, expected one of {}",
            "`services`, ".repeat(30)
        );
        let shown = quote_up_to(&text, 120);
        assert!(shown.ends_with("`,\"…"), "{shown}");
        let short = "unknown field `sneaky`, expected `task`";
        assert_eq!(
            quote_up_to(short, 120),
            format!("\"{}\"", short.escape_default())
        );
    }

    #[test]
    fn quote_cuts_long_input() {
        let shown = quote(&"a".repeat(1000));
        assert!(shown.len() < 80, "{shown}");
        assert!(shown.ends_with('…'));
    }
}
