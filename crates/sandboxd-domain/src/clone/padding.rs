//! Sparse padding. With restored statistics the planner scales `reltuples` by the file's real
//! block count, so an empty file makes every table look like one row: each relation file is
//! extended (sparsely: no disk, no memory) to the source's `relpages` blocks.

/// Postgres's default block size.
pub const BLOCK_SIZE: u64 = 8192;
/// Blocks per segment file (`RELSEG_SIZE`, 1 GiB): a larger relation continues in `<path>.1`, …
pub const SEGMENT_BLOCKS: u64 = 131_072;

/// One segment file and the length it must have.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Segment {
    /// 0 is the relation's file itself, n is `<path>.n`.
    pub number: u64,
    pub bytes: u64,
}

/// The segments of a relation whose first file is `current_bytes` long, so it spans `relpages`
/// blocks; nothing when it already does (a file is never shortened).
pub fn padding(current_bytes: u64, relpages: i64) -> Vec<Segment> {
    let target_blocks = u64::try_from(relpages).unwrap_or(0);
    let current_blocks = current_bytes / BLOCK_SIZE;
    if target_blocks <= current_blocks {
        return Vec::new();
    }
    let segments = target_blocks.div_ceil(SEGMENT_BLOCKS);
    (0..segments)
        .map(|number| {
            let blocks = (target_blocks - number * SEGMENT_BLOCKS).min(SEGMENT_BLOCKS);
            Segment {
                number,
                bytes: blocks * BLOCK_SIZE,
            }
        })
        .filter(|s| s.number > 0 || s.bytes > current_bytes)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_relation_grows_its_one_file() {
        assert_eq!(
            padding(8192, 100),
            [Segment {
                number: 0,
                bytes: 100 * BLOCK_SIZE
            }]
        );
    }

    #[test]
    fn nothing_shrinks_and_nothing_empty_grows() {
        assert!(padding(800 * BLOCK_SIZE, 100).is_empty());
        assert!(padding(0, 0).is_empty());
        assert!(padding(0, -1).is_empty());
    }

    #[test]
    fn past_a_gigabyte_the_relation_continues_in_segment_files() {
        let segments = padding(0, 2 * SEGMENT_BLOCKS as i64 + 10);
        assert_eq!(
            segments,
            [
                Segment {
                    number: 0,
                    bytes: SEGMENT_BLOCKS * BLOCK_SIZE
                },
                Segment {
                    number: 1,
                    bytes: SEGMENT_BLOCKS * BLOCK_SIZE
                },
                Segment {
                    number: 2,
                    bytes: 10 * BLOCK_SIZE
                },
            ]
        );
    }
}
