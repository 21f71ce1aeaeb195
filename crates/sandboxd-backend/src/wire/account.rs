//! What a pool member's handed-out account is, read over the held superuser connection: the
//! hand-out compares it with what it was when the account was proven by its own login, so a
//! warm hand-out answers without a second login (`IdleMember::ready`, `members.rs`).
//!
//! The text holds the password's verifier or hash: it is kept as a secret and only compared.

use redis::Value;
use redis::aio::MultiplexedConnection;
use sandboxd_domain::engine::sql_literal;
use secrecy::SecretString;
use tokio_postgres::{Client, SimpleQueryMessage};

use super::WireError;

/// Everything about `user` that a login and its rights depend on: its attributes, password
/// verifier and expiry, memberships and per-role settings, and whether it owns the database
/// the session is in and its `public` schema. Every name is qualified and every operator
/// spelled `OPERATOR(pg_catalog.…)`, and values come back as their types' own text, so no
/// object in the member's schema (a clone's) takes part in the query.
fn postgres_account_query(user: &str) -> String {
    format!(
        "SELECT r.rolsuper, r.rolinherit, r.rolcreaterole, r.rolcreatedb, r.rolcanlogin, \
         r.rolreplication, r.rolbypassrls, r.rolconnlimit, r.rolpassword, r.rolvaliduntil, \
         d.datdba OPERATOR(pg_catalog.=) r.oid, n.nspowner OPERATOR(pg_catalog.=) r.oid, \
         (SELECT pg_catalog.count(*) FROM pg_catalog.pg_auth_members m \
          WHERE m.member OPERATOR(pg_catalog.=) r.oid), \
         (SELECT pg_catalog.count(*) FROM pg_catalog.pg_db_role_setting s \
          WHERE s.setrole OPERATOR(pg_catalog.=) r.oid) \
         FROM pg_catalog.pg_authid r, pg_catalog.pg_database d, pg_catalog.pg_namespace n \
         WHERE r.rolname OPERATOR(pg_catalog.=) {user} \
         AND d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database() \
         AND n.nspname OPERATOR(pg_catalog.=) 'public'",
        user = sql_literal(user),
    )
}

pub(super) async fn of_postgres(client: &Client, user: &str) -> Result<SecretString, WireError> {
    let messages = client
        .simple_query(&postgres_account_query(user))
        .await
        .map_err(super::postgres::refused)?;
    let mut rows = messages.iter().filter_map(|message| match message {
        SimpleQueryMessage::Row(row) => Some(row),
        _ => None,
    });
    let (Some(row), None) = (rows.next(), rows.next()) else {
        return Err(WireError(format!("the account {user:?} is not there")));
    };
    let fields: Vec<&str> = (0..row.len())
        .map(|i| row.get(i).unwrap_or("NULL"))
        .collect();
    Ok(SecretString::from(fields.join("|")))
}

/// `ACL GETUSER`'s whole answer: flags (`on`), password hashes, commands, keys, channels and
/// selectors.
pub(super) async fn of_redis(
    conn: &mut MultiplexedConnection,
    user: &str,
) -> Result<SecretString, WireError> {
    let answer: Value = redis::cmd("ACL")
        .arg("GETUSER")
        .arg(user)
        .query_async(conn)
        .await
        .map_err(WireError::from_display)?;
    if matches!(answer, Value::Nil) {
        return Err(WireError(format!("the account {user:?} is not there")));
    }
    Ok(SecretString::from(format!("{answer:?}")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_account_query_names_only_the_catalog() {
        let sql = postgres_account_query("sandbox");
        assert!(sql.contains("r.rolname OPERATOR(pg_catalog.=) 'sandbox'"));
        // Every `=` is the catalog's, every relation and function qualified.
        assert!(!sql.contains(" = "), "{sql}");
        for word in sql.split_whitespace() {
            if word.contains('(') && !word.starts_with('(') {
                assert!(
                    word.starts_with("pg_catalog.") || word.starts_with("OPERATOR(pg_catalog."),
                    "{word} in {sql}"
                );
            }
        }
        assert!(postgres_account_query("a'b").contains("'a''b'"));
    }
}
