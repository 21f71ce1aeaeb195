//! Quoting for the statements the daemon builds. Applied to values it generated (hex passwords,
//! verifiers) and validated (names), and also to text it did not write: names and statistics
//! read from a clone source, names of databases and roles an agent made. Those are why the
//! quoting is complete (every quote character doubled), not a formality.

/// Quotes an SQL string literal (standard-conforming: doubled single quotes).
pub fn sql_literal(value: &str) -> String {
    format!("'{}'", value.replace('\'', "''"))
}

/// Quotes an SQL identifier with double quotes (Postgres).
pub fn pg_identifier(value: &str) -> String {
    format!("\"{}\"", value.replace('"', "\"\""))
}

/// Quotes a MySQL/MariaDB identifier with backticks.
pub fn mysql_identifier(value: &str) -> String {
    format!("`{}`", value.replace('`', "``"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quotes_are_doubled() {
        assert_eq!(sql_literal("a'b"), "'a''b'");
        assert_eq!(pg_identifier("a\"b"), "\"a\"\"b\"");
        assert_eq!(mysql_identifier("a`b"), "`a``b`");
    }
}
