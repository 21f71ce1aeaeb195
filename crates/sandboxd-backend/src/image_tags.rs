//! Image names as both container backends read them: which tags may run a given major version.

/// `images` with each tag's leading version replaced by `major` (`postgres:16-alpine` →
/// `postgres:18-alpine`); an image whose tag starts with no version is left out.
pub(crate) fn for_major(images: &[String], major: u32) -> Vec<String> {
    let mut images: Vec<String> = images
        .iter()
        .filter_map(|image| {
            let (repository, tag) = image.rsplit_once(':')?;
            if tag.contains('/') {
                return None;
            }
            let rest = tag.trim_start_matches(|c: char| c.is_ascii_digit());
            (rest.len() < tag.len()).then(|| format!("{repository}:{major}{rest}"))
        })
        .collect();
    images.dedup();
    images
}
