//! The settings tree against README's reference, and loading it: every test that calls
//! `Settings::load` runs in a `figment::Jail`, since `load` reads `SANDBOXD_*` variables that
//! other tests set.
#![allow(clippy::result_large_err)] // figment's Jail decides its closures' error type

use std::path::Path;
use std::time::Duration;

use sandboxd_admin::AdminConfig;
use sandboxd_domain::EngineRef;
use secrecy::SecretString;

use super::*;

/// Every key of the settings tree, dotted; per-engine maps as `engines.<engine>.…`.
fn leaf_keys(prefix: &str, value: &serde_json::Value, out: &mut Vec<String>) {
    match value {
        serde_json::Value::Object(map) if prefix == "engines" || prefix == "pools" => {
            let per_engine = format!("{prefix}.<engine>");
            for engine_settings in map.values() {
                leaf_keys(&per_engine, engine_settings, out);
            }
        }
        serde_json::Value::Object(map) => {
            for (key, child) in map {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                leaf_keys(&path, child, out);
            }
        }
        _ => out.push(prefix.to_owned()),
    }
}

#[test]
fn the_readme_documents_every_setting() {
    figment::Jail::expect_with(|_| {
        let readme = include_str!("../../../../README.md");
        let mut defaults = Settings::load(None).map_err(|e| e.to_string())?;
        // The per-engine maps are empty by default: one entry each shows their keys.
        defaults
            .engines
            .insert("postgres".into(), EngineSettings::default());
        defaults
            .pools
            .insert("postgres".into(), PoolSettings::default());
        let settings = serde_json::to_value(defaults).expect("json");
        let mut keys = Vec::new();
        leaf_keys("", &settings, &mut keys);
        keys.dedup();
        assert!(
            keys.contains(&"broker.idle_ttl_secs".to_owned()),
            "{keys:?}"
        );
        let missing: Vec<&String> = keys
            .iter()
            .filter(|key| !readme.contains(&format!("| `{key}` |")))
            .collect();
        assert!(
            missing.is_empty(),
            "README's configuration reference lacks {missing:?}"
        );
        Ok(())
    });
}

#[test]
fn defaults_load_without_a_file() {
    figment::Jail::expect_with(|_| {
        let settings = Settings::load(None).map_err(|e| e.to_string())?;
        assert_eq!(settings.backend, BackendChoice::Auto);
        assert_eq!(settings.env_prefix.as_str(), "ROBOCO_TEST");
        assert_eq!(settings.docker.memory_mb, 512);
        Ok(())
    });
}

#[test]
fn env_overrides_the_file_and_other_prefixed_variables_are_not_config() {
    figment::Jail::expect_with(|jail| {
        jail.create_file("s.toml", "[process]\nrun_as = \"from-file\"\n")?;
        jail.set_env("SANDBOXD_PROCESS__RUN_AS", "from-env");
        jail.set_env("SANDBOXD_DOCKER__NETWORK", "agents");
        jail.set_env("SANDBOXD_REQUIRE_DOCKER", "1");
        let settings = Settings::load(Some(Path::new("s.toml"))).map_err(|e| e.to_string())?;
        assert_eq!(settings.process.run_as, "from-env");
        assert_eq!(settings.docker.network.as_deref(), Some("agents"));
        Ok(())
    });
}

#[test]
fn seconds_and_milliseconds_keys_are_durations_from_the_file_and_the_env() {
    figment::Jail::expect_with(|jail| {
        jail.create_file(
            "s.toml",
            "[broker]\ngrace_secs = 7\nidle_ttl_secs = 60\npool_backoff_base_ms = 250\n\
             [engines.redis]\nreadiness_deadline_secs = 9\n",
        )?;
        jail.set_env("SANDBOXD_DOCKER__STOP_TIMEOUT_SECS", "4");
        jail.set_env("SANDBOXD_KUBERNETES__START_TIMEOUT_SECS", "90");
        jail.set_env("SANDBOXD_BROKER__MCP_SESSION_JSON_BUDGET_MS", "0");
        let settings = Settings::load(Some(Path::new("s.toml"))).map_err(|e| e.to_string())?;
        assert_eq!(settings.broker.grace, Duration::from_secs(7));
        assert_eq!(settings.broker.mcp_session_json_budget, Duration::ZERO);
        assert_eq!(settings.broker.idle_ttl, Some(Duration::from_secs(60)));
        assert_eq!(settings.broker.max_lifetime, None);
        assert_eq!(
            settings.pool_tuning().backoff_base,
            Duration::from_millis(250)
        );
        assert_eq!(
            settings.docker_config().stop_timeout,
            Duration::from_secs(4)
        );
        assert_eq!(
            settings.kube_config().start_timeout,
            Duration::from_secs(90)
        );
        assert_eq!(
            settings.process_config().deadlines.get("redis"),
            Some(&Duration::from_secs(9))
        );
        Ok(())
    });
}

#[test]
fn a_value_below_1_where_one_is_needed_names_its_key() {
    figment::Jail::expect_with(|jail| {
        for (section, key) in [
            ("server", "max_body_bytes"),
            ("server", "header_timeout_secs"),
            ("server", "body_timeout_secs"),
            ("server", "max_connections"),
            ("broker", "mcp_session_ttl_secs"),
            ("broker", "mcp_sessions_per_agent"),
            ("broker", "pool_backoff_base_ms"),
            ("broker", "pool_check_interval_secs"),
            ("broker", "pool_parallel_starts"),
            ("broker", "max_heavy_calls_per_agent"),
            ("admin", "session_ttl_secs"),
            ("admin", "max_sessions"),
            ("admin", "login_attempts"),
            ("admin", "login_window_secs"),
        ] {
            let expected = format!("configuration: {section}.{key} must be at least 1");
            jail.create_file("s.toml", &format!("[{section}]\n{key} = 0\n"))?;
            let err = Settings::load(Some(Path::new("s.toml"))).expect_err("0 in the file");
            assert_eq!(err.to_string(), expected);
            jail.create_file("s.toml", &format!("[{section}]\n{key} = -1\n"))?;
            let err = Settings::load(Some(Path::new("s.toml"))).expect_err("-1 in the file");
            assert_eq!(err.to_string(), expected);
            let var = format!(
                "SANDBOXD_{}__{}",
                section.to_uppercase(),
                key.to_uppercase()
            );
            jail.set_env(&var, "0");
            let err = Settings::load(None).expect_err("0 in the environment");
            assert_eq!(err.to_string(), expected);
            jail.set_env(&var, "1");
            Settings::load(None).map_err(|e| e.to_string())?;
        }
        Ok(())
    });
}

#[test]
fn admin_settings_reach_the_admin_config_from_the_file_and_the_env() {
    let token = || SecretString::from("t".repeat(16));
    figment::Jail::expect_with(|jail| {
        let defaults = Settings::load(None)
            .map_err(|e| e.to_string())?
            .admin_config(token());
        let built_in = AdminConfig::new(token());
        assert_eq!(defaults.session_ttl, built_in.session_ttl);
        assert_eq!(defaults.secure_cookies, built_in.secure_cookies);
        assert_eq!(defaults.max_sessions, built_in.max_sessions);
        assert_eq!(defaults.login_attempts, built_in.login_attempts);
        assert_eq!(defaults.login_window, built_in.login_window);
        // Shares the `SANDBOXD_ADMIN` prefix but is not a setting of `[admin]`.
        jail.set_env("SANDBOXD_ADMIN_TOKEN", "t".repeat(16));
        jail.create_file(
            "s.toml",
            "[admin]\nsession_ttl_secs = 600\nsecure_cookies = true\nmax_sessions = 8\n",
        )?;
        let file = Some(Path::new("s.toml"));
        let config = Settings::load(file)
            .map_err(|e| e.to_string())?
            .admin_config(token());
        assert_eq!(config.session_ttl, Duration::from_secs(600));
        assert!(config.secure_cookies);
        assert_eq!(config.max_sessions, 8);
        jail.set_env("SANDBOXD_ADMIN__SESSION_TTL_SECS", "60");
        jail.set_env("SANDBOXD_ADMIN__SECURE_COOKIES", "false");
        jail.set_env("SANDBOXD_ADMIN__MAX_SESSIONS", "3");
        let config = Settings::load(file)
            .map_err(|e| e.to_string())?
            .admin_config(token());
        assert_eq!(config.session_ttl, Duration::from_secs(60));
        assert!(!config.secure_cookies);
        assert_eq!(config.max_sessions, 3);
        jail.set_env("SANDBOXD_ADMIN__MAX_SESSIONS", "0");
        let err = Settings::load(file).expect_err("no sessions at all");
        assert!(err.to_string().contains("admin.max_sessions"), "{err}");
        Ok(())
    });
}

#[test]
fn a_min_idle_alone_raises_the_pools_ceiling_and_a_set_one_is_kept() {
    figment::Jail::expect_with(|jail| {
        let pool = |toml: &str| {
            jail.create_file("s.toml", toml).expect("write");
            Settings::load(Some(Path::new("s.toml")))
                .and_then(|settings| settings.pool_configs())
                .map(|pools| (pools[0].min_idle, pools[0].max_total))
        };
        assert_eq!(
            pool("[pools.postgres]\nmin_idle = 6\n").expect("ok"),
            (6, 6)
        );
        assert_eq!(
            pool("[pools.postgres]\nmin_idle = 2\n").expect("ok"),
            (2, 4)
        );
        assert_eq!(
            pool("[pools.postgres]\nmin_idle = 2\nmax_total = 9\n").expect("ok"),
            (2, 9)
        );
        let err = pool("[pools.postgres]\nmin_idle = 6\nmax_total = 4\n").expect_err("refused");
        assert!(
            err.to_string().contains("must not exceed max_total"),
            "{err}"
        );
        Ok(())
    });
}

#[test]
fn file_values_override_defaults_and_unknown_keys_are_refused() {
    figment::Jail::expect_with(|jail| {
        let path = Path::new("sandboxd.toml");
        jail.create_file(
            path,
            "backend = \"process\"\nenv_prefix = \"ACME\"\n[engines.postgres]\nimage = \"mirror/pg:16\"\n",
        )?;
        let settings = Settings::load(Some(path)).map_err(|e| e.to_string())?;
        assert_eq!(settings.backend, BackendChoice::Process);
        assert_eq!(
            settings.images_for(EngineRef::parse("postgres").expect("registered")),
            ["mirror/pg:16"]
        );
        jail.create_file(path, "bakend = \"process\"\n")?;
        let err = Settings::load(Some(path)).expect_err("typo");
        assert!(err.to_string().contains("bakend"), "{err}");
        jail.create_file(path, "[docker]\ngrace = 5\n")?;
        let err = Settings::load(Some(path)).expect_err("the key is grace_secs");
        assert!(err.to_string().contains("`grace_secs`"), "{err}");
        jail.create_file(path, "[engines.oracle]\nimage = \"x\"\n")?;
        let err = Settings::load(Some(path)).expect_err("unknown engine");
        assert!(err.to_string().contains("allowed: postgres"), "{err}");
        Ok(())
    });
}
