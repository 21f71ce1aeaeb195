//! The wire types both ways: what the daemon encodes, the CLI decodes.

use std::collections::BTreeMap;

use sandboxd_broker::SourceTls;
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::*;

/// What the daemon encodes, a client decodes to the same value.
fn round_trip<T: Serialize + DeserializeOwned + PartialEq + std::fmt::Debug>(value: T) {
    let json = serde_json::to_value(&value).expect("serializes");
    let back: T = serde_json::from_value(json.clone()).expect("deserializes");
    assert_eq!(back, value, "{json}");
}

#[test]
fn answers_decode_to_what_was_encoded() {
    round_trip(Settings {
        daemon_id: "0a1b2c3d".into(),
        sandbox_db_enabled_stored: true,
        sandbox_db_enabled_running: false,
        env_override: Some(true),
        override_env: Some("ROBOCO_SANDBOX_DB_ENABLED=on".into()),
        takes_effect: "at the next restart".into(),
        restart_pending: false,
        running_since_ms: 1,
    });
    round_trip(RestartOut {
        status: "restarting".into(),
        running_since_ms: 1,
        message: "draining".into(),
    });
    round_trip(ProjectOut {
        slug: "p".into(),
        sandbox_services: Some(vec!["postgres".into()]),
        sandbox_extensions: Some(BTreeMap::from([("postgres".into(), vec!["vector".into()])])),
        sandbox_clones: BTreeMap::from([("postgres".into(), "shop".into())]),
        sandbox_sizes: BTreeMap::from([("postgres".into(), "2G".into())]),
        created_at_ms: 1,
        updated_at_ms: 2,
    });
    round_trip(SourceOut {
        name: "shop".into(),
        privacy: "no-values".into(),
        refresh_secs: 3600,
        created_at_ms: 1,
        updated_at_ms: 2,
        last_attempt_at_ms: Some(3),
        last_error: None,
        snapshot: Some(SnapshotOut {
            taken_at_ms: 3,
            server_version: "PostgreSQL 18.6".into(),
            took_ms: 400,
            summary: Some(SnapshotSummaryOut {
                tables: 12,
                partitioned_tables: 1,
                indexes: 20,
                expression_indexes: 2,
                materialized_views: 1,
                column_statistics: 30,
                extended_statistics: 1,
                settings: 40,
                extensions: 2,
                left_out: vec![LeftOutOut {
                    what: "extended statistics (1)".into(),
                    why: "PostgreSQL cannot restore it".into(),
                }],
            }),
        }),
        tls: Some(
            SourceTls::new(Some("require"), None, false)
                .expect("valid")
                .into(),
        ),
    });
    round_trip(SandboxOut {
        owner: "dev-1".into(),
        maker: "cli".into(),
        foreign: true,
        engines: vec!["redis".into()],
        backends: vec!["process".into()],
        created_at_ms: 3,
        last_used_at_ms: None,
        status: "live".into(),
        instances: vec![InstanceOut {
            name: "sbx-dev-1-redis".into(),
            engine: "redis".into(),
            backend: "process".into(),
            host: "127.0.0.1".into(),
            port: 6400,
            created_at_ms: 3,
            live: true,
            status: "running".into(),
            image: None,
            tracked: true,
        }],
    });
    round_trip(JanitorOut {
        examined: 2,
        reaped: vec![ReapedOut {
            instance: "sbx-x".into(),
            reason: "owner_gone".into(),
        }],
        kept_young: 1,
        foreign: 3,
        forgotten: 0,
    });
    round_trip(ErrorBody {
        error: "not_found".into(),
        message: "no such project".into(),
    });
}

#[test]
fn answers_tolerate_new_fields_and_requests_refuse_unknown_ones() {
    let answer = serde_json::json!({"owner": "a", "removed": 1, "added_later": true});
    assert!(serde_json::from_value::<TeardownOut>(answer).is_ok());
    let request = serde_json::json!({"sandbox_db_enabled": true, "typo": 1});
    assert!(serde_json::from_value::<PutSettings>(request).is_err());
}
