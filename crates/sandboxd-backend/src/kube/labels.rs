//! The labels every object of an instance carries, under the configured prefix
//! (`sandboxd.dev/…`): the schema's (`crate::labels`) as `<prefix>/name`, and the instance's own
//! name beside them, for the selectors of its NetworkPolicy and Service.

use std::collections::BTreeMap;

use sandboxd_domain::{AgentSlug, DaemonId, EngineRef};

use crate::labels::{Keys, OWNER};

/// The instance's own name, for the selectors of its NetworkPolicy and Service.
const INSTANCE: &str = "instance";

/// What the labels of one object say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Parsed {
    pub engine: EngineRef,
    pub owner: AgentSlug,
    pub maker: DaemonId,
    /// Unix milliseconds; 0 when missing or malformed (treated as old).
    pub created_at_ms: i64,
    pub port: u16,
}

/// The labels every object carries, under the configured prefix (`sandboxd.dev/…`). They are
/// how instances are found again after any restart; none holds a credential.
#[derive(Debug, Clone)]
pub(crate) struct Labels {
    keys: Keys,
}

impl Labels {
    pub fn new(prefix: &str) -> Self {
        Self {
            keys: Keys::prefixed(prefix),
        }
    }

    /// `<prefix>/sandbox=1`: the selector of every sandboxd object.
    pub fn selector(&self) -> String {
        self.keys.marker()
    }

    pub fn owner_key(&self) -> String {
        self.keys.key(OWNER)
    }

    pub fn for_instance(
        &self,
        name: &str,
        engine: EngineRef,
        owner: &AgentSlug,
        maker: &DaemonId,
        created_at_ms: i64,
    ) -> BTreeMap<String, String> {
        let mut labels: BTreeMap<String, String> =
            self.keys.for_instance(engine, owner, maker, created_at_ms);
        labels.insert(self.keys.key(INSTANCE), name.to_owned());
        labels
    }

    /// The selector of one instance's Pod.
    pub fn instance(&self, name: &str) -> BTreeMap<String, String> {
        BTreeMap::from([(self.keys.key(INSTANCE), name.to_owned())])
    }

    /// Engine, owner, maker, creation and port; None when any is missing or invalid (not an
    /// object this backend made).
    pub fn parse(&self, labels: Option<&BTreeMap<String, String>>) -> Option<Parsed> {
        let labels = labels?;
        let read = self.keys.read(|key| labels.get(key).map(String::as_str))?;
        Some(Parsed {
            engine: read.engine,
            owner: read.owner,
            maker: read.maker?,
            created_at_ms: read.created_at_ms,
            port: read.port?,
        })
    }
}

#[cfg(test)]
mod tests {
    use sandboxd_domain::engines;

    use super::*;

    #[test]
    fn labels_read_back_and_others_do_not() {
        let labels = Labels::new("sandboxd.dev");
        let engine = engines::lookup("redis").expect("registered");
        let owner = AgentSlug::parse("qa-7").expect("slug");
        let maker = DaemonId::parse("d00d").expect("id");
        let set = labels.for_instance("n", engine, &owner, &maker, 1234);
        let parsed = labels.parse(Some(&set)).expect("ours");
        assert_eq!(parsed.owner, owner);
        assert_eq!(parsed.maker, maker);
        assert_eq!(parsed.created_at_ms, 1234);
        assert_eq!(parsed.port, engine.port);
        assert_eq!(Labels::new("other.dev").parse(Some(&set)), None);
        assert_eq!(labels.selector(), "sandboxd.dev/sandbox=1");
    }
}
