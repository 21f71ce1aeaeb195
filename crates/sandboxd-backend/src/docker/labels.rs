//! The labels every container (and every network sandboxd makes) carries, under a configurable
//! namespace (`sandboxd` by default): the schema's (`crate::labels`) as `<ns>.name`, and
//! Docker's own extras for networks.

use std::collections::HashMap;

use sandboxd_domain::{AgentSlug, DaemonId, EngineRef};

use crate::labels::{CREATED, DAEMON, Keys, created_at_ms};

/// The network the container joined, when it publishes nothing.
const NETWORK: &str = "network";
/// Marks a network sandboxd made (which also carries daemon and created): a daemon's own, or
/// an instance's.
const DAEMON_NETWORK: &str = "sandbox-network";
/// On a network: `1`, it is one instance's own. On a container: the name of its own network.
const INSTANCE_NETWORK: &str = "instance-network";

/// What the labels of one container say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Parsed {
    pub engine: EngineRef,
    pub owner: AgentSlug,
    /// `unknown` for a container from before makers were labeled.
    pub maker: DaemonId,
    /// Unix milliseconds; 0 when the label is missing or malformed (treated as old).
    pub created_at_ms: i64,
    pub port: u16,
    pub network: Option<String>,
}

#[derive(Debug, Clone)]
pub(crate) struct Labels {
    keys: Keys,
}

impl Labels {
    pub fn new(namespace: &str) -> Self {
        Self {
            keys: Keys::dotted(namespace),
        }
    }

    fn key(&self, name: &str) -> String {
        self.keys.key(name)
    }

    /// `<ns>.sandbox=1`: the label every sandboxd container carries, for list filters.
    pub fn marker(&self) -> String {
        self.keys.marker()
    }

    /// The list filter selecting every sandboxd container.
    pub fn filter(&self) -> HashMap<String, Vec<String>> {
        HashMap::from([("label".to_owned(), vec![self.marker()])])
    }

    pub fn for_instance(
        &self,
        engine: EngineRef,
        owner: &AgentSlug,
        maker: &DaemonId,
        created_at_ms: i64,
        network: Option<&str>,
        own_network: Option<&str>,
    ) -> HashMap<String, String> {
        let mut labels: HashMap<String, String> =
            self.keys.for_instance(engine, owner, maker, created_at_ms);
        if let Some(network) = network {
            labels.insert(self.key(NETWORK), network.to_owned());
        }
        if let Some(own) = own_network {
            labels.insert(self.key(INSTANCE_NETWORK), own.to_owned());
        }
        labels
    }

    /// The labels of one instance's own network.
    pub fn for_instance_network(
        &self,
        maker: &DaemonId,
        created_at_ms: i64,
    ) -> HashMap<String, String> {
        let mut labels = self.for_daemon_network(maker, created_at_ms);
        labels.insert(self.key(INSTANCE_NETWORK), "1".to_owned());
        labels
    }

    /// The list filter selecting `maker`'s instance networks.
    pub fn instance_networks_filter(&self, maker: &DaemonId) -> HashMap<String, Vec<String>> {
        HashMap::from([(
            "label".to_owned(),
            vec![
                format!("{}=1", self.key(INSTANCE_NETWORK)),
                format!("{}={maker}", self.key(DAEMON)),
            ],
        )])
    }

    /// Creation time of an instance network `maker` made; None for any other network.
    pub fn parse_instance_network(
        &self,
        labels: Option<&HashMap<String, String>>,
        maker: &DaemonId,
    ) -> Option<i64> {
        let created = self.parse_daemon_network(labels, maker)?;
        (labels?.get(&self.key(INSTANCE_NETWORK)).map(String::as_str) == Some("1"))
            .then_some(created)
    }

    /// The container's own network, when it has one.
    pub fn instance_network_of(&self, labels: Option<&HashMap<String, String>>) -> Option<String> {
        labels?
            .get(&self.key(INSTANCE_NETWORK))
            .filter(|name| !name.is_empty() && *name != "1")
            .cloned()
    }

    /// The labels of a daemon's own network.
    pub fn for_daemon_network(
        &self,
        maker: &DaemonId,
        created_at_ms: i64,
    ) -> HashMap<String, String> {
        HashMap::from([
            (self.key(DAEMON_NETWORK), "1".to_owned()),
            (self.key(DAEMON), maker.to_string()),
            (self.key(CREATED), created_at_ms.to_string()),
        ])
    }

    /// The filter selecting every container `maker` made.
    pub fn made_by_filter(&self, maker: &DaemonId) -> HashMap<String, Vec<String>> {
        HashMap::from([(
            "label".to_owned(),
            vec![self.marker(), format!("{}={maker}", self.key(DAEMON))],
        )])
    }

    /// Creation time of the network `maker` made; None for any other network.
    pub fn parse_daemon_network(
        &self,
        labels: Option<&HashMap<String, String>>,
        maker: &DaemonId,
    ) -> Option<i64> {
        let labels = labels?;
        let get = |name: &str| labels.get(&self.key(name));
        if get(DAEMON_NETWORK).map(String::as_str) != Some("1")
            || get(DAEMON).map(String::as_str) != Some(maker.as_str())
        {
            return None;
        }
        Some(created_at_ms(get(CREATED).map(String::as_str)))
    }

    /// True when the container carries `<ns>.sandbox=1`.
    pub fn is_ours(&self, labels: Option<&HashMap<String, String>>) -> bool {
        labels.is_some_and(|l| self.keys.is_marked(|key| l.get(key).map(String::as_str)))
    }

    /// Reads the labels back; None when they are not ours or do not name a registered engine
    /// and a valid owner.
    pub fn parse(&self, labels: Option<&HashMap<String, String>>) -> Option<Parsed> {
        let labels = labels?;
        let read = self.keys.read(|key| labels.get(key).map(String::as_str))?;
        Some(Parsed {
            engine: read.engine,
            owner: read.owner,
            maker: read.maker.unwrap_or_else(DaemonId::unknown),
            created_at_ms: read.created_at_ms,
            port: read.port.unwrap_or(read.engine.port),
            network: labels.get(&self.key(NETWORK)).cloned(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_round_trip_under_the_namespace() {
        let labels = Labels::new("acme.sbx");
        let engine = EngineRef::parse("redis").expect("registered");
        let owner = AgentSlug::parse("dev-1").expect("valid");
        let maker = DaemonId::generate();
        let map = labels.for_instance(engine, &owner, &maker, 1234, Some("agents"), None);
        assert_eq!(map["acme.sbx.sandbox"], "1");
        assert_eq!(map["acme.sbx.owner"], "dev-1");
        assert_eq!(map["acme.sbx.daemon"], maker.as_str());
        assert_eq!(map["acme.sbx.engine"], "redis");
        assert_eq!(map["acme.sbx.created"], "1234");
        let parsed = labels.parse(Some(&map)).expect("ours");
        assert_eq!(parsed.engine, engine);
        assert_eq!(parsed.owner, owner);
        assert_eq!(parsed.maker, maker);
        assert_eq!(parsed.created_at_ms, 1234);
        assert_eq!(parsed.port, 6379);
        assert_eq!(parsed.network.as_deref(), Some("agents"));
        assert_eq!(labels.filter()["label"], ["acme.sbx.sandbox=1"]);
        assert_eq!(labels.instance_network_of(Some(&map)), None);
    }

    #[test]
    fn an_instance_network_is_named_by_its_container_and_found_only_by_its_maker() {
        let labels = Labels::new("sandboxd");
        let (mine, other) = (DaemonId::generate(), DaemonId::generate());
        let engine = EngineRef::parse("postgres").expect("registered");
        let owner = AgentSlug::parse("dev-1").expect("valid");
        let container =
            labels.for_instance(engine, &owner, &mine, 7, None, Some("sandboxd-inet-x-1"));
        assert_eq!(
            labels.instance_network_of(Some(&container)).as_deref(),
            Some("sandboxd-inet-x-1")
        );
        let network = labels.for_instance_network(&mine, 42);
        assert_eq!(
            labels.parse_instance_network(Some(&network), &mine),
            Some(42)
        );
        assert_eq!(labels.parse_instance_network(Some(&network), &other), None);
        // A daemon network is not an instance network, nor a network a container.
        let daemon = labels.for_daemon_network(&mine, 42);
        assert_eq!(labels.parse_instance_network(Some(&daemon), &mine), None);
        assert_eq!(labels.instance_network_of(Some(&network)), None);
        assert!(labels.parse(Some(&network)).is_none());
        assert_eq!(
            labels.instance_networks_filter(&mine)["label"],
            [
                "sandboxd.instance-network=1".to_owned(),
                format!("sandboxd.daemon={mine}")
            ]
        );
    }

    #[test]
    fn daemon_networks_are_found_only_by_their_maker() {
        let labels = Labels::new("sandboxd");
        let (mine, other) = (DaemonId::generate(), DaemonId::generate());
        let map = labels.for_daemon_network(&mine, 42);
        assert_eq!(labels.parse_daemon_network(Some(&map), &mine), Some(42));
        assert_eq!(labels.parse_daemon_network(Some(&map), &other), None);
        // A daemon network is not a container: `parse` never mistakes it for an instance.
        assert!(labels.parse(Some(&map)).is_none());
        assert_eq!(
            labels.made_by_filter(&mine)["label"],
            [
                "sandboxd.sandbox=1".to_owned(),
                format!("sandboxd.daemon={mine}")
            ]
        );
    }

    #[test]
    fn foreign_or_forged_labels_are_not_parsed() {
        let labels = Labels::new("sandboxd");
        assert!(labels.parse(None).is_none());
        let foreign = HashMap::from([("other.sandbox".to_owned(), "1".to_owned())]);
        assert!(labels.parse(Some(&foreign)).is_none());
        let forged = HashMap::from([
            ("sandboxd.sandbox".to_owned(), "1".to_owned()),
            ("sandboxd.engine".to_owned(), "oracle".to_owned()),
            ("sandboxd.owner".to_owned(), "../x".to_owned()),
        ]);
        assert!(labels.is_ours(Some(&forged)));
        assert!(labels.parse(Some(&forged)).is_none());
    }
}
