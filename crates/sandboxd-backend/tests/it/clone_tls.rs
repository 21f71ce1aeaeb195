//! Clone sources over TLS, on Docker: a real PostgreSQL 18 "production" (`clone::Production`)
//! with a server certificate a throwaway CA signed (made here with rcgen). Its snapshot
//! connection (rustls) and `pg_dump` (libpq in a throwaway container, handed the CA on its
//! stdin) both verify it, and production's own `pg_stat_ssl` shows each session encrypted; a
//! wrong CA, a wrong host name, the default roots and `sslmode=require` against a server with
//! no TLS each fail saying why, never quoting a password.

use std::future::Future;
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use sandboxd_backend::Backend;
use sandboxd_backend::clone::{SourceError, read_source};
use sandboxd_domain::clone::Privacy;
use secrecy::{ExposeSecret, SecretString};
use tokio_postgres::{Client, SimpleQueryMessage};

use crate::clone::{Production, READER, ServerTls, assert_secret_absent};
use crate::docker::{Harness, POSTGRES18, harness_owner};
use crate::support::engine;

/// The name production's certificate is for; the tests dial its bridge address as `hostaddr`.
const PROD_NAME: &str = "prod.sandboxd.test";

/// A CA of the test's own, and a server certificate for [`PROD_NAME`] it signed.
struct Pki {
    ca_pem: String,
    server: ServerTls,
}

impl Pki {
    fn new(ca_name: &str) -> Self {
        let ca_key = KeyPair::generate().expect("a CA key");
        let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name.push(DnType::CommonName, ca_name);
        ca.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca_cert = ca.self_signed(&ca_key).expect("the CA certificate");
        let issuer = Issuer::new(ca, ca_key);
        let server_key = KeyPair::generate().expect("a server key");
        let mut server = CertificateParams::new(vec![PROD_NAME.to_owned()]).expect("params");
        server
            .distinguished_name
            .push(DnType::CommonName, PROD_NAME);
        server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let server_cert = server
            .signed_by(&server_key, &issuer)
            .expect("the server certificate");
        Self {
            ca_pem: ca_cert.pem(),
            server: ServerTls {
                cert_pem: server_cert.pem(),
                key_pem: server_key.serialize_pem(),
            },
        }
    }
}

/// A DSN for the snapshot role: `host` names the server (what verify-full checks), the bridge
/// address is dialed, and `tls` adds the TLS keys.
fn dsn(production: &Production, host: &str, tls: &str) -> SecretString {
    SecretString::from(format!(
        "host={host} hostaddr={} port=5432 user={READER} password={} dbname=shop {tls}",
        production.host,
        production.reader_password.expose_secret()
    ))
}

/// Runs `session` (a connection to production named `application`) while `holder` keeps it
/// waiting on a lock `lock` takes, and answers what production's `pg_stat_ssl` says of that
/// session while it waits: `(ssl, version)`. The lock is let go before `session`'s outcome is
/// awaited.
async fn tls_of_session<T, F>(
    holder: &Client,
    lock: &str,
    application: &str,
    session: F,
) -> ((bool, String), T)
where
    F: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    holder
        .batch_execute(&format!("BEGIN; {lock}"))
        .await
        .expect("take the lock");
    let running = tokio::spawn(session);
    let deadline = Instant::now() + Duration::from_secs(120);
    // The lock holder asks: planning a query on pg_stat_activity reads catalogs the lock
    // might hold. The snapshot of activity is per transaction: cleared at each ask. Only a
    // session waiting on the lock counts: one still authenticating is listed before its TLS
    // is (PostgreSQL 18 shows sessions from their start).
    let query = format!(
        "SELECT s.ssl::text || ' ' || coalesce(s.version, '') \
         FROM pg_catalog.pg_stat_ssl s \
         JOIN pg_catalog.pg_stat_get_activity(NULL) a ON a.pid = s.pid \
         WHERE a.application_name = '{application}' AND a.wait_event_type = 'Lock' \
           AND a.pid <> pg_catalog.pg_backend_pid()"
    );
    let seen = loop {
        holder
            .batch_execute("SELECT pg_catalog.pg_stat_clear_snapshot()")
            .await
            .expect("a fresh look");
        let rows = holder.simple_query(&query).await.expect("pg_stat_ssl");
        let found = rows.iter().find_map(|m| match m {
            SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
            _ => None,
        });
        if let Some(found) = found {
            break found;
        }
        assert!(
            !running.is_finished(),
            "the {application} session ended before production saw it wait"
        );
        assert!(
            Instant::now() < deadline,
            "no {application} session within 120 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    holder.batch_execute("COMMIT").await.expect("let go");
    let outcome = running.await.expect("the session's task");
    let (ssl, version) = seen.split_once(' ').unwrap_or((&seen, ""));
    ((ssl == "true", version.to_owned()), outcome)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_over_tls_is_verified_by_the_snapshot_and_pg_dump_and_encrypted() {
    const TAG: &str = "clonetls";
    let Some(harness) = Harness::new(TAG, &[POSTGRES18], |_| {}).await else {
        return;
    };
    harness
        .run(|backend, docker| async move {
            let pki = Pki::new("sandboxd test CA");
            let stranger = Pki::new("some other CA");
            let files = tempfile::tempdir().expect("tempdir");
            let ca = files.path().join("ca.pem");
            let wrong_ca = files.path().join("wrong-ca.pem");
            std::fs::write(&ca, &pki.ca_pem).expect("write the CA");
            std::fs::write(&wrong_ca, &stranger.ca_pem).expect("write the other CA");
            let (ca, wrong_ca) = (ca.display().to_string(), wrong_ca.display().to_string());

            let production =
                Production::start_with(&docker, POSTGRES18, &harness_owner(TAG), Some(&pki.server))
                    .await;
            production
                .load(
                    "CREATE TABLE readings (id int PRIMARY KEY, sensor int NOT NULL); \
                     INSERT INTO readings SELECT g, g % 50 FROM generate_series(1, 5000) g; \
                     ANALYZE readings",
                    &[],
                )
                .await;
            let secrets = [&production.reader_password];
            let postgres = engine("postgres");

            // No TLS on the server yet: `require` refuses to go on in cleartext, both ways.
            let require = dsn(&production, PROD_NAME, "sslmode=require");
            let refused = read_source("shop", &require, Privacy::KeepValues)
                .await
                .expect_err("require against a server without TLS");
            let text = refused.to_string();
            assert!(matches!(refused, SourceError::Tls { .. }), "{text}");
            assert!(
                text.contains("sslmode=require") && text.contains("does not support TLS"),
                "{text}"
            );
            assert_secret_absent("a refused TLS", &text, &secrets);
            let refused = backend
                .dump_schema(postgres, 18, &require)
                .await
                .expect_err("pg_dump with require against a server without TLS")
                .to_string();
            assert!(refused.contains("SSL"), "{refused}");
            assert_secret_absent("a refused pg_dump", &refused, &secrets);

            production.enable_tls().await;
            let holder = production.superuser().await.expect("production superuser");

            // verify-full with the CA: the snapshot's session is encrypted, as production sees
            // it (held on a catalog lock while it is looked at).
            let verified = dsn(
                &production,
                PROD_NAME,
                &format!("sslmode=verify-full sslrootcert={ca}"),
            );
            let for_read = verified.clone();
            let ((ssl, version), read) = tls_of_session(
                &holder,
                "LOCK TABLE pg_catalog.pg_statistic IN ACCESS EXCLUSIVE MODE",
                "sandboxd-snapshot",
                async move { read_source("shop", &for_read, Privacy::KeepValues).await },
            )
            .await;
            assert!(ssl, "pg_stat_ssl: the snapshot's session is not encrypted");
            assert!(version.starts_with("TLSv1."), "{version}");
            let snapshot = read.expect("a snapshot over verified TLS");
            assert!(
                snapshot.relations.iter().any(|r| r.name == "readings"),
                "{:?}",
                snapshot.relations
            );

            // pg_dump (libpq, handed the CA on its stdin) too.
            let for_dump = verified.clone();
            let dumper = backend.clone();
            let ((ssl, version), dumped) = tls_of_session(
                &holder,
                "LOCK TABLE public.readings IN ACCESS EXCLUSIVE MODE",
                "pg_dump",
                async move { dumper.dump_schema(postgres, 18, &for_dump).await },
            )
            .await;
            assert!(ssl, "pg_stat_ssl: pg_dump's session is not encrypted");
            assert!(version.starts_with("TLSv1."), "{version}");
            let schema = dumped.expect("pg_dump over verified TLS");
            assert!(schema.contains("CREATE TABLE public.readings"), "{schema}");

            // No sslmode and a host that is not loopback: verify-full is the default. With the
            // CA it passes; with the system roots (which never signed this certificate) not.
            let defaulted = dsn(&production, PROD_NAME, &format!("sslrootcert={ca}"));
            sandboxd_backend::clone::take_snapshot(
                &*backend,
                postgres,
                "shop",
                &defaulted,
                Privacy::KeepValues,
            )
            .await
            .expect("a whole snapshot, verify-full by default");
            let system = dsn(&production, PROD_NAME, "");
            let refused = read_source("shop", &system, Privacy::KeepValues)
                .await
                .expect_err("the system roots do not know the test CA");
            let text = refused.to_string();
            assert!(
                matches!(refused, SourceError::TlsVerification { .. }),
                "{text}"
            );
            assert!(text.contains("sslmode=verify-full, roots system"), "{text}");

            // A CA that did not sign the certificate: refused by the snapshot and by pg_dump.
            let wrong = dsn(
                &production,
                PROD_NAME,
                &format!("sslmode=verify-full sslrootcert={wrong_ca}"),
            );
            let refused = read_source("shop", &wrong, Privacy::KeepValues)
                .await
                .expect_err("a wrong CA");
            let text = refused.to_string();
            eprintln!("wrong CA: {text}");
            assert!(text.contains("failed TLS verification"), "{text}");
            assert!(text.contains(&wrong_ca), "names the roots it used: {text}");
            assert_secret_absent("a failed verification", &text, &secrets);
            let refused = backend
                .dump_schema(postgres, 18, &wrong)
                .await
                .expect_err("pg_dump with a wrong CA")
                .to_string();
            eprintln!("pg_dump, wrong CA: {refused}");
            assert!(
                refused.contains("certificate verify failed")
                    && refused.contains(&format!("sslmode=verify-full, roots {wrong_ca}")),
                "{refused}"
            );
            assert_secret_absent("a failed pg_dump", &refused, &secrets);

            // The right CA, but the certificate is not for the address dialed: verify-full
            // refuses, verify-ca (the chain only) accepts, in both clients.
            let by_address = |mode: &str| {
                SecretString::from(format!(
                    "host={} port=5432 user={READER} password={} dbname=shop sslmode={mode} \
                     sslrootcert={ca}",
                    production.host,
                    production.reader_password.expose_secret()
                ))
            };
            let refused = read_source("shop", &by_address("verify-full"), Privacy::KeepValues)
                .await
                .expect_err("a certificate for another name");
            let text = refused.to_string();
            assert!(
                matches!(refused, SourceError::TlsVerification { .. }),
                "{text}"
            );
            assert!(text.contains("not valid for name"), "{text}");
            assert!(
                backend
                    .dump_schema(postgres, 18, &by_address("verify-full"))
                    .await
                    .is_err(),
                "pg_dump checks the name too"
            );
            read_source("shop", &by_address("verify-ca"), Privacy::KeepValues)
                .await
                .expect("verify-ca checks the chain, not the name");
            backend
                .dump_schema(postgres, 18, &by_address("verify-ca"))
                .await
                .expect("pg_dump with verify-ca");

            drop(holder);
            production.remove(&docker).await;
        })
        .await;
}
