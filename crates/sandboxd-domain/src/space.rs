//! How much room an instance's data gets. [`DataSize`] is a data space's size: a backend's
//! default, or a project's own (`sandboxd projects set … --size postgres=2G`), which the broker
//! holds between [`DataSize::MIN_MB`] and the operator's ceiling. A project's sizes per engine
//! are `crate::project_sizes`. [`memory_cap_mb`] is how every backend grows an instance's memory
//! cap with its data space, since a tmpfs's pages count against the memory of what writes them.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::{InputError, quote};

/// The size of an instance's data space, in MiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DataSize {
    mb: u64,
}

impl DataSize {
    /// The least a project may ask for: below it MariaDB's system tablespace, redo log and
    /// system tables leave a test suite nothing.
    pub const MIN_MB: u64 = 256;
    /// A container's data space when its project sets none (Docker, Kubernetes): the data
    /// tmpfs of Postgres, MariaDB and MongoDB.
    pub const CONTAINER_DEFAULT: DataSize = DataSize { mb: 256 };

    /// `512M`, `2G`, `1536MB`, `2GiB` (case-insensitive, whole numbers only), at least
    /// [`Self::MIN_MB`]. A bare number is refused: a size without its unit is ambiguous.
    pub fn parse(text: &str) -> Result<Self, InputError> {
        let malformed = |detail: String| InputError::Malformed {
            what: "size",
            detail,
        };
        let trimmed = text.trim();
        let digits = trimmed.bytes().take_while(u8::is_ascii_digit).count();
        let (number, unit) = trimmed.split_at(digits);
        let per_unit = match unit.trim().to_ascii_lowercase().as_str() {
            "m" | "mb" | "mib" => 1,
            "g" | "gb" | "gib" => 1024,
            _ => {
                return Err(malformed(format!(
                    "{} is not a size; give a whole number and a unit, like 512M or 2G",
                    quote(text)
                )));
            }
        };
        let mb = number
            .parse::<u64>()
            .ok()
            .and_then(|n| n.checked_mul(per_unit))
            .ok_or_else(|| malformed(format!("{} is not a size", quote(text))))?;
        if mb < Self::MIN_MB {
            return Err(malformed(format!(
                "{} is below the least size, {}",
                quote(text),
                Self::from_mb(Self::MIN_MB)
            )));
        }
        Ok(Self { mb })
    }

    /// A size a backend is configured with, taken as given (its settings are the operator's).
    pub const fn from_mb(mb: u64) -> Self {
        Self { mb }
    }

    pub const fn mb(self) -> u64 {
        self.mb
    }
}

/// `2G` when a whole number of GiB, else `1536M`: what [`DataSize::parse`] reads back.
impl fmt::Display for DataSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.mb >= 1024 && self.mb.is_multiple_of(1024) {
            write!(f, "{}G", self.mb / 1024)
        } else {
            write!(f, "{}M", self.mb)
        }
    }
}

impl Serialize for DataSize {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for DataSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let raw = String::deserialize(d)?;
        Self::parse(&raw).map_err(serde::de::Error::custom)
    }
}

/// The memory cap of an instance whose data space is `size`, when `memory_mb` is the cap set for
/// a data space of `default`: it grows by what the data space grows beyond the default (the
/// server's own memory stays what it was) and never shrinks below the configured cap.
pub fn memory_cap_mb(memory_mb: u64, default: DataSize, size: DataSize) -> u64 {
    memory_mb.saturating_add(size.mb().saturating_sub(default.mb()))
}

/// The most one tmpfs of a container may take of its memory cap: three quarters of it, or all
/// but the 256 MB a default-sized container leaves its server when the cap grew with a bigger
/// data space ([`memory_cap_mb`]).
pub fn tmpfs_ceiling_mb(memory_mb: u64) -> u64 {
    (memory_mb * 3 / 4).max(memory_mb.saturating_sub(DataSize::CONTAINER_DEFAULT.mb()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_with_their_unit_and_print_back_the_same() {
        for (text, mb, shown) in [
            ("2G", 2048, "2G"),
            ("512M", 512, "512M"),
            (" 1536mb ", 1536, "1536M"),
            ("1GiB", 1024, "1G"),
            ("3072M", 3072, "3G"),
        ] {
            let size = DataSize::parse(text).expect(text);
            assert_eq!(size.mb(), mb, "{text}");
            assert_eq!(size.to_string(), shown, "{text}");
            assert_eq!(DataSize::parse(shown).expect("round trip"), size);
        }
        for bad in [
            "2048",
            "2T",
            "1.5G",
            "-1G",
            "G",
            "",
            "128M",
            "99999999999999999999G",
        ] {
            let err = DataSize::parse(bad).expect_err(bad).to_string();
            assert!(err.contains("size"), "{bad}: {err}");
        }
        assert!(
            DataSize::parse("128M")
                .expect_err("too small")
                .to_string()
                .contains("least size, 256M")
        );
    }

    #[test]
    fn the_memory_cap_grows_with_the_data_space_and_never_shrinks() {
        let default = DataSize::CONTAINER_DEFAULT;
        assert_eq!(memory_cap_mb(512, default, default), 512);
        assert_eq!(memory_cap_mb(512, default, DataSize::from_mb(2048)), 2304);
        assert_eq!(
            memory_cap_mb(2048, DataSize::from_mb(512), DataSize::from_mb(256)),
            2048
        );
        // A grown cap holds its data tmpfs whole.
        assert_eq!(tmpfs_ceiling_mb(512), 384);
        assert_eq!(tmpfs_ceiling_mb(2304), 2048);
    }
}
