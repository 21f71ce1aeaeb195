//! Redis over the `redis` crate, always with an ACL user and password (the `default` user is off).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{
    AsyncConnectionConfig, ConnectionAddr, IntoConnectionInfo, RedisConnectionInfo, Value,
};
use sandboxd_domain::engine::{Activation, AdminAccess, AdminStep, FeatureSpec, ServerFacts};
use sandboxd_domain::{Credentials, Feature};
use secrecy::{ExposeSecret, SecretString};
use tokio::net::TcpStream;

use super::capped::{CappedStream, Framing, ReadCap};
use super::query::{Collector, Cut, QueryAnswer, QueryLimits};
use super::{ActivationError, Reach, WireError, major_version, password_admin};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

async fn connect(
    reach: Reach<'_>,
    creds: &Credentials,
) -> Result<MultiplexedConnection, WireError> {
    let info = ConnectionAddr::Tcp(reach.host.to_owned(), reach.port)
        .into_connection_info()
        .map_err(WireError::from_display)?
        .set_redis_settings(
            RedisConnectionInfo::default()
                .set_username(&creds.user)
                .set_password(creds.password.expose_secret())
                .set_skip_set_lib_name(),
        );
    let client = redis::Client::open(info).map_err(WireError::from_display)?;
    tokio::time::timeout(CONNECT_TIMEOUT, client.get_multiplexed_async_connection())
        .await
        .map_err(|_| WireError("connect timed out".into()))?
        .map_err(WireError::from_display)
}

/// The handed-out account over a TCP stream read under `cap` (`capped.rs`), waiting up to
/// `timeout` for each reply (a blocking command's own timeout may be that long).
async fn connect_under(
    reach: Reach<'_>,
    creds: &Credentials,
    cap: Arc<ReadCap>,
    timeout: Duration,
) -> Result<MultiplexedConnection, WireError> {
    let settings = RedisConnectionInfo::default()
        .set_username(&creds.user)
        .set_password(creds.password.expose_secret())
        .set_skip_set_lib_name();
    let opened = async {
        let tcp = TcpStream::connect((reach.host, reach.port))
            .await
            .map_err(WireError::from_display)?;
        tcp.set_nodelay(true).map_err(WireError::from_display)?;
        let stream = CappedStream::new(tcp, cap, Framing::Unframed);
        let config = AsyncConnectionConfig::new().set_response_timeout(Some(timeout));
        MultiplexedConnection::new_with_config(&settings, stream, config)
            .await
            .map_err(WireError::from_display)
    };
    let (conn, driver) = tokio::time::timeout(CONNECT_TIMEOUT, opened)
        .await
        .map_err(|_| WireError("connect timed out".into()))??;
    // The driver moves replies to the connection; it ends when the connection is dropped.
    tokio::spawn(driver);
    Ok(conn)
}

fn admin_creds(admin: &AdminAccess) -> Result<&Credentials, WireError> {
    password_admin(admin, "Redis")
}

pub(super) async fn server_facts(
    admin: &AdminAccess,
    reach: Reach<'_>,
) -> Result<ServerFacts, WireError> {
    let mut conn = connect(reach, admin_creds(admin)?).await?;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn)
        .await
        .map_err(WireError::from_display)?;
    Ok(ServerFacts {
        major_version: info
            .lines()
            .find_map(|line| line.strip_prefix("redis_version:"))
            .and_then(major_version),
    })
}

/// A superuser connection, for a session held open.
pub(super) async fn connect_admin(
    admin: &AdminAccess,
    reach: Reach<'_>,
) -> Result<MultiplexedConnection, WireError> {
    connect(reach, admin_creds(admin)?).await
}

pub(super) async fn ping(conn: &mut MultiplexedConnection) -> Result<(), WireError> {
    let pong: String = redis::cmd("PING")
        .query_async(conn)
        .await
        .map_err(WireError::from_display)?;
    if pong == "PONG" {
        Ok(())
    } else {
        Err(WireError(format!("PING answered {pong:?}")))
    }
}

/// One command and its arguments; the server's error is the error.
pub(super) async fn command(
    conn: &mut MultiplexedConnection,
    words: &[SecretString],
) -> Result<(), WireError> {
    let Some((name, args)) = words.split_first() else {
        return Err(WireError("an empty Redis command".into()));
    };
    let mut cmd = redis::cmd(name.expose_secret());
    for arg in args {
        cmd.arg(arg.expose_secret());
    }
    cmd.query_async::<Value>(conn)
        .await
        .map(drop)
        .map_err(WireError::from_display)
}

/// One setup step as superuser: Redis takes commands only.
pub(super) async fn run_step(
    admin: Option<&AdminAccess>,
    reach: Reach<'_>,
    step: &AdminStep,
) -> Result<(), WireError> {
    let admin = admin.ok_or_else(|| WireError("Redis needs superuser access".into()))?;
    let AdminStep::RedisCommand { words } = step else {
        return Err(WireError("Redis runs commands only".into()));
    };
    let mut conn = connect(reach, admin_creds(admin)?).await?;
    command(&mut conn, words).await
}

pub(super) async fn probe(reach: Reach<'_>, agent: &Credentials) -> Result<(), WireError> {
    let mut conn = connect(reach, agent).await?;
    ping(&mut conn).await
}

/// One module `MODULE LIST` names: its name and version (`ver`, 21005 for 2.10.5).
#[derive(Debug, Clone, PartialEq, Eq)]
struct LoadedModule {
    name: String,
    version: Option<String>,
}

/// The loaded modules from `MODULE LIST` (RESP2 or RESP3 shapes).
fn loaded_modules(list: &Value) -> Vec<LoadedModule> {
    let Value::Array(modules) = list else {
        return vec![];
    };
    modules
        .iter()
        .filter_map(|module| {
            let fields: Vec<&Value> = match module {
                Value::Array(items) => items.iter().collect(),
                Value::Map(pairs) => pairs.iter().flat_map(|(k, v)| [k, v]).collect(),
                _ => return None,
            };
            let field = |wanted: &str| {
                fields.chunks(2).find_map(|pair| match pair {
                    [key, value] if text_of(key).as_deref() == Some(wanted) => Some(*value),
                    _ => None,
                })
            };
            Some(LoadedModule {
                name: field("name").and_then(text_of)?,
                version: field("ver").and_then(|ver| match ver {
                    Value::Int(n) => Some(dotted_version(*n)),
                    other => text_of(other)?.parse().ok().map(dotted_version),
                }),
            })
        })
        .collect()
}

fn text_of(value: &Value) -> Option<String> {
    match value {
        Value::BulkString(bytes) => Some(String::from_utf8_lossy(bytes).into_owned()),
        Value::SimpleString(text) => Some(text.clone()),
        _ => None,
    }
}

/// A module's `ver` as Redis modules encode it (`major * 10000 + minor * 100 + patch`).
fn dotted_version(ver: i64) -> String {
    format!("{}.{}.{}", ver / 10000, ver / 100 % 100, ver % 100)
}

async fn module_list(conn: &mut MultiplexedConnection) -> Result<Vec<LoadedModule>, WireError> {
    let list: Value = redis::cmd("MODULE")
        .arg("LIST")
        .query_async(conn)
        .await
        .map_err(WireError::from_display)?;
    Ok(loaded_modules(&list))
}

/// The version of each allowlisted module loaded in the server, by feature name, asked as
/// superuser (the handed-out account may not run `MODULE`).
pub(super) async fn module_versions(
    admin: &AdminAccess,
    reach: Reach<'_>,
    features: &[FeatureSpec],
) -> Result<BTreeMap<&'static str, String>, WireError> {
    let mut conn = connect(reach, admin_creds(admin)?).await?;
    let loaded = module_list(&mut conn).await?;
    Ok(features
        .iter()
        .filter_map(|spec| {
            let Activation::RedisModule { names, .. } = spec.activation else {
                return None;
            };
            let module = loaded
                .iter()
                .find(|m| names.iter().any(|n| m.name.eq_ignore_ascii_case(n)))?;
            Some((spec.name, module.version.clone()?))
        })
        .collect())
}

pub(super) async fn activate(
    admin: &AdminAccess,
    reach: Reach<'_>,
    feature: &Feature,
) -> Result<(), ActivationError> {
    let Activation::RedisModule {
        names, libraries, ..
    } = feature.spec().activation
    else {
        return Err(ActivationError::Missing(format!(
            "{} is not a Redis module",
            feature.name()
        )));
    };
    let mut conn = connect(reach, admin_creds(admin)?).await?;
    let loaded = module_list(&mut conn).await?;
    if loaded
        .iter()
        .any(|l| names.iter().any(|n| l.name.eq_ignore_ascii_case(n)))
    {
        return Ok(());
    }
    let mut last_error = String::from("no module library configured");
    for library in libraries {
        let loaded: Result<Value, _> = redis::cmd("MODULE")
            .arg("LOAD")
            .arg(*library)
            .query_async(&mut conn)
            .await;
        match loaded {
            Ok(_) => return Ok(()),
            Err(err) => last_error = format!("MODULE LOAD {library}: {err}"),
        }
    }
    Err(ActivationError::Missing(format!(
        "module {} is not loaded and could not be loaded ({last_error})",
        feature.name()
    )))
}

/// Runs each command as superuser.
pub(super) async fn reset(
    admin: &AdminAccess,
    reach: Reach<'_>,
    commands: &[Vec<&'static str>],
) -> Result<(), WireError> {
    let mut conn = connect(reach, admin_creds(admin)?).await?;
    for command in commands {
        let Some((name, args)) = command.split_first() else {
            continue;
        };
        let _: Value = redis::cmd(name)
            .arg(args)
            .query_async(&mut conn)
            .await
            .map_err(WireError::from_display)?;
    }
    Ok(())
}

/// The server's version, asked as the handed-out account.
pub(super) async fn version(reach: Reach<'_>, agent: &Credentials) -> Result<String, WireError> {
    let mut conn = connect(reach, agent).await?;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut conn)
        .await
        .map_err(WireError::from_display)?;
    info.lines()
        .find_map(|line| line.strip_prefix("redis_version:"))
        .map(|v| v.trim().to_owned())
        .ok_or_else(|| WireError("INFO server names no redis_version".into()))
}

/// One command as the handed-out account (`sandbox_sql`): an array reply is one row per
/// element, any other reply one row, under `limits`.
pub(super) async fn agent_query(
    reach: Reach<'_>,
    agent: &Credentials,
    command: &[String],
    limits: QueryLimits,
) -> Result<QueryAnswer, WireError> {
    let Some((name, args)) = command.split_first() else {
        return Err(WireError("an empty command".into()));
    };
    // The driver parses a reply whole before handing it on, so the whole reply is what is
    // bounded: past `wire_max` bytes the connection ends and nothing of the reply is kept.
    let cap = ReadCap::new(usize::MAX, Some(limits.wire_max()));
    let mut conn = connect_under(reach, agent, cap.clone(), limits.timeout).await?;
    let mut collector = Collector::new(limits);
    collector.answer.columns = vec!["reply".to_owned()];
    let reply: Value = match redis::cmd(name).arg(args).query_async(&mut conn).await {
        Ok(reply) => reply,
        Err(_) if cap.tripped() => {
            collector.cut(Cut::MaxBytes);
            return Ok(collector.answer);
        }
        Err(err) => return Err(WireError::from_display(err)),
    };
    match reply {
        Value::Array(items) | Value::Set(items) => {
            collector.answer.affected = u64::try_from(items.len()).ok();
            for item in items {
                if !collector.push(vec![json_of(item)]) {
                    break;
                }
            }
        }
        other => {
            collector.push(vec![json_of(other)]);
        }
    }
    Ok(collector.answer)
}

/// A Redis reply as JSON.
fn json_of(value: Value) -> serde_json::Value {
    use serde_json::Value as J;
    match value {
        Value::Nil => J::Null,
        Value::Int(n) => n.into(),
        Value::BulkString(bytes) => String::from_utf8_lossy(&bytes).into_owned().into(),
        Value::SimpleString(text) => text.into(),
        Value::Okay => "OK".into(),
        Value::Double(f) => f.into(),
        Value::Boolean(b) => b.into(),
        Value::Array(items) | Value::Set(items) => {
            J::Array(items.into_iter().map(json_of).collect())
        }
        Value::Map(pairs) => J::Array(
            pairs
                .into_iter()
                .map(|(k, v)| J::Array(vec![json_of(k), json_of(v)]))
                .collect(),
        ),
        Value::VerbatimString { text, .. } => text.into(),
        Value::BigNumber(n) => String::from_utf8_lossy(&n).into_owned().into(),
        other => format!("{other:?}").into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_list_parses_resp2_and_resp3() {
        let resp2 = Value::Array(vec![Value::Array(vec![
            Value::BulkString(b"name".to_vec()),
            Value::BulkString(b"search".to_vec()),
            Value::BulkString(b"ver".to_vec()),
            Value::Int(21005),
        ])]);
        let search = LoadedModule {
            name: "search".into(),
            version: Some("2.10.5".into()),
        };
        assert_eq!(loaded_modules(&resp2), [search]);
        let resp3 = Value::Array(vec![Value::Map(vec![
            (
                Value::SimpleString("name".into()),
                Value::BulkString(b"ReJSON".to_vec()),
            ),
            (Value::SimpleString("ver".into()), Value::Int(20803)),
        ])]);
        let json = LoadedModule {
            name: "ReJSON".into(),
            version: Some("2.8.3".into()),
        };
        assert_eq!(loaded_modules(&resp3), [json]);
    }

    #[test]
    fn module_versions_read_as_dotted_triples() {
        assert_eq!(dotted_version(21005), "2.10.5");
        assert_eq!(dotted_version(80000), "8.0.0");
        assert_eq!(dotted_version(20802), "2.8.2");
    }
}
