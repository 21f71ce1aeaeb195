//! Which source a project's engine is a clone of, and under which privacy mode: one registered
//! source serves a project that may see its sample values and one that must not. The source's
//! snapshot is taken under the source's own mode; a project that asks for less gets a copy with
//! the values stripped ([`snapshot_under`]), and one that asks for more than the source gives is
//! refused when it is set (a snapshot without values cannot gain them).

use std::fmt;

use super::snapshot::{Privacy, Snapshot};
use crate::error::{InputError, allowed_list};
use crate::names::SourceName;

/// A project's clone of one engine: `shop`, or `shop:no-values`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloneChoice {
    pub source: SourceName,
    /// None: the source's own mode.
    pub privacy: Option<Privacy>,
}

const PRIVACIES: [Privacy; 2] = [Privacy::KeepValues, Privacy::NoValues];

impl CloneChoice {
    /// A clone of `source` under the source's own mode.
    pub fn of(source: SourceName) -> Self {
        Self {
            source,
            privacy: None,
        }
    }

    /// `<source>` or `<source>:<privacy>`; an unknown mode is refused naming the allowed ones.
    pub fn parse(text: &str) -> Result<Self, InputError> {
        let (source, privacy) = match text.trim().split_once(':') {
            Some((source, privacy)) => (source.trim(), Some(privacy.trim())),
            None => (text.trim(), None),
        };
        let source = SourceName::parse(source)?;
        let privacy = privacy
            .map(|word| {
                Privacy::parse(word).ok_or_else(|| InputError::Malformed {
                    what: "clone privacy",
                    detail: format!(
                        "{} is not a privacy mode; allowed: {} (as in {source}:no-values)",
                        crate::error::quote(word),
                        allowed_list(PRIVACIES.map(Privacy::as_str))
                    ),
                })
            })
            .transpose()?;
        Ok(Self { source, privacy })
    }

    /// The mode a clone of this choice is made under from a snapshot taken under `taken`: the
    /// stricter of the two.
    pub fn privacy_over(&self, taken: Privacy) -> Privacy {
        self.privacy.map_or(taken, |wanted| stricter(wanted, taken))
    }
}

impl fmt::Display for CloneChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.privacy {
            Some(privacy) => write!(f, "{}:{}", self.source, privacy.as_str()),
            None => write!(f, "{}", self.source),
        }
    }
}

/// The mode that lets less of the source's data through.
pub fn stricter(a: Privacy, b: Privacy) -> Privacy {
    if a == Privacy::NoValues || b == Privacy::NoValues {
        Privacy::NoValues
    } else {
        Privacy::KeepValues
    }
}

/// The snapshot a clone under `privacy` is made from: `snapshot` as it is, or, when `privacy`
/// is stricter than the mode it was taken under, with every sample value stripped
/// ([`Snapshot::with_privacy`]). A snapshot taken without values keeps its mode: it has none to
/// give.
pub fn snapshot_under(snapshot: Snapshot, privacy: Privacy) -> Snapshot {
    let mode = stricter(privacy, snapshot.privacy);
    if mode == snapshot.privacy {
        snapshot
    } else {
        snapshot.with_privacy(mode)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A snapshot as stored (read the way old and new ones are, so fields added with a
    /// default later need nothing here), under `privacy`.
    fn snapshot(privacy: Privacy) -> Snapshot {
        let stored: Snapshot = serde_json::from_value(serde_json::json!({
            "source": "shop", "taken_at_ms": 7, "server_version": "PostgreSQL 18.1",
            "server_version_num": 180_001, "database": "shop", "schema_sql": "",
            "relations": [], "settings": [], "extensions": [], "extended_statistics": [],
            "privacy": "keep-values",
            "columns": [{"schema": "public", "table": "orders", "column": "status",
                         "inherited": false, "null_frac": "0", "avg_width": "5",
                         "n_distinct": "3", "most_common_vals": "{paid,open}",
                         "most_common_freqs": "{0.9,0.1}", "histogram_bounds": "{a,b}",
                         "correlation": null, "most_common_elems": null,
                         "most_common_elem_freqs": null, "elem_count_histogram": null,
                         "range_length_histogram": null, "range_empty_frac": null,
                         "range_bounds_histogram": null}]
        }))
        .expect("a stored snapshot");
        stored.with_privacy(privacy)
    }

    #[test]
    fn a_choice_parses_with_or_without_a_mode_and_prints_back() {
        let plain = CloneChoice::parse(" shop ").expect("valid");
        assert_eq!(
            plain,
            CloneChoice::of(SourceName::parse("shop").expect("valid"))
        );
        assert_eq!(plain.to_string(), "shop");
        let strict = CloneChoice::parse("shop : no-values").expect("valid");
        assert_eq!(strict.privacy, Some(Privacy::NoValues));
        assert_eq!(strict.to_string(), "shop:no-values");
        assert_eq!(
            CloneChoice::parse(&strict.to_string()).expect("round trip"),
            strict
        );
        let keep = CloneChoice::parse("shop:keep-values").expect("valid");
        assert_eq!(keep.privacy, Some(Privacy::KeepValues));
    }

    #[test]
    fn an_unknown_mode_is_refused_naming_the_allowed_ones() {
        let refused = CloneChoice::parse("shop:secret").expect_err("unknown mode");
        let text = refused.to_string();
        assert!(
            text.contains("\"secret\"") && text.contains("allowed: keep-values, no-values"),
            "{text}"
        );
        assert!(CloneChoice::parse("Not A Name:no-values").is_err());
        assert!(CloneChoice::parse(":no-values").is_err());
    }

    #[test]
    fn a_stricter_project_strips_the_values_and_a_snapshot_without_them_never_gains_any() {
        let kept = snapshot(Privacy::KeepValues);
        assert!(kept.columns[0].most_common_vals.is_some());
        let same = snapshot_under(kept.clone(), Privacy::KeepValues);
        assert_eq!(same, kept, "nothing changes at the snapshot's own mode");

        let stripped = snapshot_under(kept.clone(), Privacy::NoValues);
        assert_eq!(stripped.privacy, Privacy::NoValues);
        let text = serde_json::to_string(&stripped).expect("json");
        for value in ["paid", "open", "{a,b}"] {
            assert!(!text.contains(value), "{value} in {text}");
        }
        assert_eq!(stripped.columns[0].n_distinct.as_deref(), Some("3"));
        assert_eq!(stripped.taken_at_ms, kept.taken_at_ms);

        let none = snapshot(Privacy::NoValues);
        let asked_for_more = snapshot_under(none.clone(), Privacy::KeepValues);
        assert_eq!(asked_for_more, none, "no values to give back");

        let choice = CloneChoice::parse("shop:no-values").expect("valid");
        assert_eq!(choice.privacy_over(Privacy::KeepValues), Privacy::NoValues);
        let own = CloneChoice::parse("shop").expect("valid");
        assert_eq!(own.privacy_over(Privacy::KeepValues), Privacy::KeepValues);
        assert_eq!(own.privacy_over(Privacy::NoValues), Privacy::NoValues);
    }
}
