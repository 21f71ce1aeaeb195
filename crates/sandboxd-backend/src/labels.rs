//! The label schema: the names of the labels every backend writes on an instance and what each
//! one means. They are how instances are found again after any restart: `list`, the janitor and
//! stale-name checks read them, never an in-memory id. No label ever holds a credential.
//!
//! A backend chooses only how a name sits under its namespace ([`Keys`]: `<ns>.name` on Docker,
//! `<prefix>/name` on Kubernetes) and the extras it needs of its own (Docker's networks, the
//! Kubernetes instance selector). Every key and value here is on containers and Pods that run
//! already: changing one loses them after an upgrade.

use sandboxd_domain::{AgentSlug, DaemonId, EngineRef};

/// `1` on everything sandboxd made: the marker `list` filters select by.
pub(crate) const SANDBOX: &str = "sandbox";
/// The agent the instance belongs to (a pool slot while it waits in a pool).
pub(crate) const OWNER: &str = "owner";
/// The maker: a daemon's store id, or `cli`.
pub(crate) const DAEMON: &str = "daemon";
/// The engine's registered name.
pub(crate) const ENGINE: &str = "engine";
/// When it was made, in Unix milliseconds.
pub(crate) const CREATED: &str = "created";
/// The engine's port inside the container or Pod.
pub(crate) const PORT: &str = "port";

/// How one backend turns a label's name into its key.
#[derive(Debug, Clone)]
pub(crate) struct Keys {
    namespace: String,
    separator: char,
}

/// What the schema's labels of one instance say, before a backend decides which of them it
/// requires.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Read {
    pub engine: EngineRef,
    pub owner: AgentSlug,
    /// None when the label is missing; an invalid one is no instance at all.
    pub maker: Option<DaemonId>,
    /// Unix milliseconds; 0 when the label is missing or malformed (treated as old).
    pub created_at_ms: i64,
    /// None when the label is missing or malformed.
    pub port: Option<u16>,
}

impl Keys {
    /// Docker's (and Podman's) keys: `<namespace>.name`.
    pub fn dotted(namespace: &str) -> Self {
        Self {
            namespace: namespace.to_owned(),
            separator: '.',
        }
    }

    /// Kubernetes' keys: `<prefix>/name`, the prefix a DNS subdomain.
    pub fn prefixed(prefix: &str) -> Self {
        Self {
            namespace: prefix.to_owned(),
            separator: '/',
        }
    }

    pub fn key(&self, name: &str) -> String {
        format!("{}{}{name}", self.namespace, self.separator)
    }

    /// `<key of sandbox>=1`: the selector of everything sandboxd made.
    pub fn marker(&self) -> String {
        format!("{}=1", self.key(SANDBOX))
    }

    /// The labels every instance carries on every backend.
    pub fn for_instance<M: FromIterator<(String, String)>>(
        &self,
        engine: EngineRef,
        owner: &AgentSlug,
        maker: &DaemonId,
        created_at_ms: i64,
    ) -> M {
        M::from_iter([
            (self.key(SANDBOX), "1".to_owned()),
            (self.key(OWNER), owner.to_string()),
            (self.key(DAEMON), maker.to_string()),
            (self.key(ENGINE), engine.name.to_owned()),
            (self.key(CREATED), created_at_ms.to_string()),
            (self.key(PORT), engine.port.to_string()),
        ])
    }

    /// True when `get` finds the marker.
    pub fn is_marked<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> bool {
        get(&self.key(SANDBOX)) == Some("1")
    }

    /// Reads the schema's labels through `get` (a key's value); None when the marker is absent,
    /// or the engine, the owner or a present maker is missing or invalid.
    pub fn read<'a>(&self, get: impl Fn(&str) -> Option<&'a str>) -> Option<Read> {
        if !self.is_marked(&get) {
            return None;
        }
        let get = |name: &str| get(&self.key(name));
        Some(Read {
            engine: EngineRef::parse(get(ENGINE)?).ok()?,
            owner: AgentSlug::parse(get(OWNER)?).ok()?,
            maker: match get(DAEMON) {
                Some(value) => Some(DaemonId::parse(value).ok()?),
                None => None,
            },
            created_at_ms: created_at_ms(get(CREATED)),
            port: get(PORT).and_then(|v| v.parse().ok()),
        })
    }
}

/// The value of a `created` label in Unix milliseconds; 0 when it is missing or malformed
/// (treated as old).
pub(crate) fn created_at_ms(value: Option<&str>) -> i64 {
    value.and_then(|v| v.parse().ok()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};

    use super::*;

    /// Each label's name, its key without `namespace`, and its value.
    fn names<'a>(
        labels: impl IntoIterator<Item = (&'a String, &'a String)>,
        namespace: &str,
    ) -> BTreeMap<String, String> {
        labels
            .into_iter()
            .map(|(key, value)| {
                let name = key.strip_prefix(namespace).expect("under the namespace");
                (name.to_owned(), value.clone())
            })
            .collect()
    }

    /// The same instance labeled by both backends: the same names with the same values, under
    /// each one's namespace, and only each one's extras beside them.
    #[test]
    fn docker_and_kubernetes_use_the_same_names() {
        let engine = EngineRef::parse("postgres").expect("registered");
        let owner = AgentSlug::parse("dev-1").expect("valid");
        let maker = DaemonId::parse("abc123").expect("id");
        let docker: HashMap<String, String> = crate::docker::labels::Labels::new("sandboxd")
            .for_instance(engine, &owner, &maker, 42, None, None);
        let kube: BTreeMap<String, String> = crate::kube::labels::Labels::new("sandboxd.dev")
            .for_instance("n", engine, &owner, &maker, 42);
        let docker = names(&docker, "sandboxd.");
        let mut kube = names(&kube, "sandboxd.dev/");
        assert_eq!(
            kube.remove("instance").as_deref(),
            Some("n"),
            "Kubernetes' extra"
        );
        assert_eq!(docker, kube);
        assert_eq!(
            docker.keys().map(String::as_str).collect::<Vec<_>>(),
            [CREATED, DAEMON, ENGINE, OWNER, PORT, SANDBOX]
        );
    }
}
