//! Server versions as `doctor` reports and compares them: the first version number in what a
//! server program prints (`postgres --version`, `redis-server --version`) or in what an image's
//! metadata says (`org.opencontainers.image.version`, `PG_VERSION`), and their order.

/// The first dotted version number in `text`: `15.14` in `postgres (PostgreSQL) 15.14 (Debian
/// …)`, `7.0.15` in `Redis server v=7.0.15 sha=…`, `11.8.3` in `1:11.8.3-0+deb13u1` (a Debian
/// epoch and revision left out).
pub fn version_in(text: &str) -> Option<String> {
    text.split(|c: char| c.is_whitespace() || matches!(c, '=' | '(' | ')' | ','))
        .find_map(|word| {
            let word = word.trim_start_matches('v');
            let word = match word.split_once(':') {
                Some((epoch, rest))
                    if !epoch.is_empty() && epoch.bytes().all(|b| b.is_ascii_digit()) =>
                {
                    rest
                }
                _ => word,
            };
            let number: String = word
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            let number = number.trim_end_matches('.');
            (number.contains('.') && number.starts_with(|c: char| c.is_ascii_digit()))
                .then(|| number.to_owned())
        })
}

/// Whether version `a` is newer than `b`, number by number (`17.6` is newer than `15.14`).
pub fn is_newer(a: &str, b: &str) -> bool {
    numbers(a) > numbers(b)
}

fn numbers(version: &str) -> Vec<u64> {
    version
        .split('.')
        .map_while(|part| part.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_version_is_found_in_what_servers_and_images_say() {
        for (text, version) in [
            (
                "postgres (PostgreSQL) 15.14 (Debian 15.14-0+deb12u1)",
                "15.14",
            ),
            (
                "Redis server v=7.0.15 sha=00000000:0 malloc=jemalloc-5.3.0 bits=64",
                "7.0.15",
            ),
            (
                "mariadbd  Ver 10.11.19-MariaDB-0+deb12u1 for debian-linux-gnu on x86_64",
                "10.11.19",
            ),
            ("db version v8.0.4\nBuild Info: {", "8.0.4"),
            ("1:11.8.3-0+deb13u1", "11.8.3"),
            ("17.6", "17.6"),
        ] {
            assert_eq!(version_in(text).as_deref(), Some(version), "{text}");
        }
        assert_eq!(version_in("no version here, v, 12"), None);
    }

    #[test]
    fn versions_compare_number_by_number() {
        assert!(is_newer("17.6", "15.14"));
        assert!(is_newer("10.11.19", "10.9.2"));
        assert!(is_newer("8.0.2", "7.0.15"));
        assert!(!is_newer("15.14", "15.14"));
        assert!(!is_newer("7.0.15", "8.0.2"));
    }
}
