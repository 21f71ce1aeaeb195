//! `WHERE` clauses assembled from optional filters.

/// A `WHERE` clause whose placeholders are numbered in the order their values are bound (each
/// appears once), built without `QueryBuilder`, whose placeholders do not survive `Any` on
/// PostgreSQL.
#[derive(Default)]
pub(crate) struct Conditions {
    clauses: Vec<String>,
    /// The values to bind, in placeholder order.
    pub(crate) values: Vec<String>,
}

impl Conditions {
    /// `template` holds one `{}` where the placeholder goes.
    pub(crate) fn push(&mut self, template: &str, value: String) {
        self.values.push(value);
        let placeholder = format!("${}", self.values.len());
        self.clauses.push(template.replacen("{}", &placeholder, 1));
    }

    pub(crate) fn push_fixed(&mut self, clause: &str) {
        self.clauses.push(clause.to_owned());
    }

    /// `WHERE …`, or nothing when no condition was pushed.
    pub(crate) fn sql(&self) -> String {
        if self.clauses.is_empty() {
            String::new()
        } else {
            format!("WHERE {}", self.clauses.join(" AND "))
        }
    }
}
