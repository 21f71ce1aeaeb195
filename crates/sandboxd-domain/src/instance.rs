//! What a backend hands back for one running service, and the evidence an agent receives for it.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use secrecy::{ExposeSecret, SecretString};
use serde::ser::SerializeMap;
use serde::{Deserialize, Serialize, Serializer};

use crate::clone::CloneOrigin;
use crate::credentials::Credentials;
use crate::engine::{Activation, AdminAccess, Endpoint, FeatureKind};
use crate::engines::EngineRef;
use crate::features::Feature;
use crate::names::{AgentSlug, DaemonId, EnvPrefix};
use crate::space::DataSize;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendKind {
    Process,
    Docker,
    Kubernetes,
}

impl BackendKind {
    pub const ALL: [BackendKind; 3] = [
        BackendKind::Process,
        BackendKind::Docker,
        BackendKind::Kubernetes,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Process => "process",
            Self::Docker => "docker",
            Self::Kubernetes => "kubernetes",
        }
    }

    /// The kind [`as_str`](Self::as_str) names.
    pub fn parse(value: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|kind| kind.as_str() == value)
    }
}

impl fmt::Display for BackendKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `sandboxd-<engine>-<owner>-<maker>`: the container name and instance directory name. The
/// maker's id ends it, so two daemons on one host (or a daemon and the CLI) whose agents share a
/// slug never claim the same name; it holds no '-', so a name splits back unambiguously.
pub fn instance_name(engine: EngineRef, owner: &AgentSlug, maker: &DaemonId) -> String {
    format!("sandboxd-{}-{owner}-{maker}", engine.name)
}

/// Engine, owner and maker back from an [`instance_name`]; None for any other name.
pub fn parse_instance_name(name: &str) -> Option<(EngineRef, AgentSlug, DaemonId)> {
    let rest = name.strip_prefix("sandboxd-")?;
    let (rest, maker) = rest.rsplit_once('-')?;
    let maker = DaemonId::parse(maker).ok()?;
    crate::engines::all().find_map(|engine| {
        let owner = rest.strip_prefix(engine.name)?.strip_prefix('-')?;
        let owner = AgentSlug::parse(owner).ok()?;
        Some((engine, owner, maker.clone()))
    })
}

/// One running service instance, ready, with its handed-out account.
#[derive(Debug, Clone)]
pub struct Instance {
    pub engine: EngineRef,
    pub owner: AgentSlug,
    /// What made it: the daemon whose janitor may act on it, or the CLI.
    pub maker: DaemonId,
    pub backend: BackendKind,
    /// Container id, or the instance directory of a process.
    pub backend_id: String,
    pub name: String,
    pub host: String,
    pub port: u16,
    pub database: String,
    pub agent: Credentials,
    pub admin: AdminAccess,
    pub features: BTreeSet<Feature>,
    /// Unix milliseconds.
    pub created_at_ms: i64,
    /// What it is a clone of; None for an ordinary instance.
    pub clone: Option<CloneOrigin>,
    /// The size of its data space; None for a server that keeps its data in memory, or one
    /// recorded before sizes were.
    pub size: Option<DataSize>,
}

impl Instance {
    pub fn evidence(&self, prefix: &EnvPrefix) -> ServiceEvidence {
        let endpoint = Endpoint {
            host: &self.host,
            port: self.port,
            user: &self.agent.user,
            password: &self.agent.password,
            database: &self.database,
        };
        let (url, env) = self.engine.render(&endpoint, prefix);
        ServiceEvidence {
            service: self.engine.name,
            host: self.host.clone(),
            port: self.port,
            user: self.agent.user.clone(),
            password: self.agent.password.clone(),
            database: self.database.clone(),
            url: SecretString::from(url),
            feature_key: self.engine.feature_kind.evidence_key(),
            features: self.features.iter().map(|f| f.name().to_owned()).collect(),
            modules: (self.engine.feature_kind == FeatureKind::Module).then(|| {
                self.features
                    .iter()
                    .filter_map(ModuleEvidence::of)
                    .collect()
            }),
            env: SecretString::from(
                serde_json::to_string(&env).expect("a map of strings always serializes"),
            ),
            clone: self.clone.clone(),
            size: self.size,
        }
    }
}

/// One service of a sandbox as the agent sees it (§3.4). Serializing it exposes the credentials:
/// it is meant only for the envelope of the verb that asked for it. `Debug` shows none of them.
#[derive(Clone)]
pub struct ServiceEvidence {
    pub service: &'static str,
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: SecretString,
    pub database: String,
    pub url: SecretString,
    feature_key: &'static str,
    pub features: Vec<String>,
    /// Module engines (Redis): each activated module with its version, where known.
    pub modules: Option<Vec<ModuleEvidence>>,
    /// The JSON object of environment variables (it embeds the password).
    env: SecretString,
    pub clone: Option<CloneOrigin>,
    /// Its data space (`size_mb`), when it has one.
    pub size: Option<DataSize>,
}

impl ServiceEvidence {
    pub fn env(&self) -> BTreeMap<String, String> {
        serde_json::from_str(self.env.expose_secret()).unwrap_or_default()
    }

    /// Fills in the modules' versions from what the server reported, by feature name (a
    /// feature probe's `versions`).
    pub fn set_module_versions(&mut self, versions: &BTreeMap<&'static str, String>) {
        for module in self.modules.iter_mut().flatten() {
            if let Some(version) = versions.get(module.name) {
                module.version = Some(version.clone());
            }
        }
    }
}

/// One activated module of a module engine as the evidence lists it: the feature's name, the
/// module's own name (`MODULE LIST`), and its version (null when not known).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModuleEvidence {
    pub name: &'static str,
    pub module: &'static str,
    pub version: Option<String>,
}

impl ModuleEvidence {
    fn of(feature: &Feature) -> Option<Self> {
        let Activation::RedisModule { names, .. } = feature.spec().activation else {
            return None;
        };
        Some(Self {
            name: feature.name(),
            module: names.first()?,
            version: None,
        })
    }
}

impl fmt::Debug for ServiceEvidence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ServiceEvidence")
            .field("service", &self.service)
            .field("host", &self.host)
            .field("port", &self.port)
            .field("user", &self.user)
            .field("database", &self.database)
            .field("features", &self.features)
            .field("clone", &self.clone)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

impl Serialize for ServiceEvidence {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let entries = 10
            + usize::from(self.modules.is_some())
            + usize::from(self.clone.is_some())
            + usize::from(self.size.is_some());
        let mut map = s.serialize_map(Some(entries))?;
        map.serialize_entry("service", self.service)?;
        map.serialize_entry("host", &self.host)?;
        map.serialize_entry("port", &self.port)?;
        map.serialize_entry("user", &self.user)?;
        map.serialize_entry("password", self.password.expose_secret())?;
        map.serialize_entry("database", &self.database)?;
        map.serialize_entry("url", self.url.expose_secret())?;
        map.serialize_entry("features", &self.features)?;
        map.serialize_entry(self.feature_key, &self.features)?;
        if let Some(modules) = &self.modules {
            map.serialize_entry("modules", modules)?;
        }
        map.serialize_entry("env", &self.env())?;
        if let Some(clone) = &self.clone {
            map.serialize_entry("clone", clone)?;
        }
        if let Some(size) = self.size {
            map.serialize_entry("size_mb", &size.mb())?;
        }
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn instance(engine: &str) -> Instance {
        let engine = EngineRef::parse(engine).expect("registered");
        Instance {
            engine,
            owner: AgentSlug::parse("dev-1").expect("valid"),
            maker: DaemonId::cli(),
            backend: BackendKind::Process,
            backend_id: "x".into(),
            name: instance_name(
                engine,
                &AgentSlug::parse("dev-1").expect("valid"),
                &DaemonId::cli(),
            ),
            host: "127.0.0.1".into(),
            port: 5555,
            database: "sandbox".into(),
            agent: Credentials::generate("sandbox"),
            admin: AdminAccess::Password(Credentials::generate("admin")),
            features: [Feature::parse(engine, "vector").expect("allowlisted")].into(),
            created_at_ms: 0,
            clone: None,
            size: Some(DataSize::from_mb(512)),
        }
    }

    #[test]
    fn instance_names_split_back_into_engine_owner_and_maker() {
        for engine in crate::engines::all() {
            for owner in ["dev-1", "a", "dev-cli-2", "x-postgres-y"] {
                let owner = AgentSlug::parse(owner).expect("valid");
                let maker = DaemonId::generate();
                let name = instance_name(engine, &owner, &maker);
                assert_eq!(
                    parse_instance_name(&name),
                    Some((engine, owner, maker)),
                    "{name}"
                );
            }
        }
        for other in [
            "sandboxd-postgres",
            "sandboxd-oracle-dev-1-ab12",
            "x-postgres-dev-ab",
        ] {
            assert_eq!(parse_instance_name(other), None, "{other}");
        }
    }

    #[test]
    fn evidence_has_the_documented_shape() {
        let inst = instance("postgres");
        let json = serde_json::to_value(inst.evidence(&EnvPrefix::default())).expect("json");
        for key in [
            "service",
            "host",
            "port",
            "user",
            "password",
            "database",
            "url",
            "features",
            "available_extensions",
            "env",
        ] {
            assert!(json.get(key).is_some(), "{key} missing in {json}");
        }
        assert_eq!(json["available_extensions"][0], "vector");
        assert_eq!(
            json["size_mb"], 512,
            "the evidence says the data space's size"
        );
        assert_eq!(
            json["env"]["ROBOCO_TEST_DB_PASSWORD"],
            inst.agent.password.expose_secret()
        );
        assert_eq!(inst.name, "sandboxd-postgres-dev-1-cli");
    }

    #[test]
    fn redis_evidence_names_its_logical_database_and_each_module_with_its_version() {
        let engine = EngineRef::parse("redis").expect("registered");
        let mut inst = instance("postgres");
        inst.engine = engine;
        inst.database = engine.agent_database.to_owned();
        inst.features = ["search", "bloom"]
            .map(|name| Feature::parse(engine, name).expect("allowlisted"))
            .into();
        let mut evidence = inst.evidence(&EnvPrefix::default());
        evidence.set_module_versions(&BTreeMap::from([("search", "2.10.5".to_owned())]));
        let json = serde_json::to_value(&evidence).expect("json");
        assert_eq!(json["database"], "0");
        let url = json["url"].as_str().expect("url");
        assert!(
            url.ends_with("/0"),
            "the URL names the same database: {url}"
        );
        let names: Vec<&str> = inst.features.iter().map(|f| f.name()).collect();
        assert_eq!(json["available_modules"], serde_json::json!(names));
        let listed = |name: &str| {
            json["modules"]
                .as_array()
                .and_then(|all| all.iter().find(|m| m["name"] == name))
                .cloned()
                .unwrap_or_else(|| panic!("{name} in {json}"))
        };
        assert_eq!(
            listed("search"),
            serde_json::json!({"name": "search", "module": "search", "version": "2.10.5"})
        );
        assert_eq!(
            listed("bloom"),
            serde_json::json!({"name": "bloom", "module": "bf", "version": null})
        );
        let postgres = serde_json::to_value(instance("postgres").evidence(&EnvPrefix::default()));
        assert!(postgres.expect("json").get("modules").is_none());
    }

    #[test]
    fn debug_of_instance_and_evidence_hides_credentials() {
        let inst = instance("postgres");
        let secret = inst.agent.password.expose_secret().to_owned();
        assert!(!format!("{inst:?}").contains(&secret));
        assert!(!format!("{:?}", inst.evidence(&EnvPrefix::default())).contains(&secret));
    }

    #[test]
    fn backend_kinds_round_trip() {
        for kind in BackendKind::ALL {
            assert_eq!(BackendKind::parse(kind.as_str()), Some(kind));
        }
        assert_eq!(BackendKind::parse("vm"), None);
    }
}
