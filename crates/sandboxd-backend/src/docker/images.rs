//! Is an engine's image present on the engine, and what does it declare? sandboxd never pulls:
//! the daemon may run where no registry is reachable, and an operator decides which images run.

use bollard::Docker;
use sandboxd_domain::EngineRef;

use super::client;
use crate::error::BackendError;

/// Images built by `scripts/build-images.sh` carry this prefix.
const LOCAL_PREFIX: &str = "sandboxd-local/";

/// What the image declares that the create body must account for.
#[derive(Debug, Clone, Default)]
pub(super) struct ImageFacts {
    /// `VOLUME` paths: each gets a tmpfs so no anonymous volume is ever created.
    pub volumes: Vec<String>,
}

/// How to get `image` onto the engine.
pub(super) fn hint(engine: EngineRef, image: &str) -> String {
    if image.starts_with(LOCAL_PREFIX) {
        "build it with scripts/build-images.sh (it builds every sandboxd-local image from \
         Debian's packages, no registry needed)"
            .to_owned()
    } else {
        format!(
            "pull it with `docker pull {image}` (sandboxd never pulls by itself); where no \
             registry is reachable, build the local images with scripts/build-images.sh and set \
             [engines.{}] image = \"sandboxd-local/…\"",
            engine.name
        )
    }
}

/// The image's facts, or `ImageMissing` naming it and how to get it.
pub(super) async fn inspect(
    docker: &Docker,
    engine: EngineRef,
    image: &str,
) -> Result<ImageFacts, BackendError> {
    match docker.inspect_image(image).await {
        Ok(found) => Ok(ImageFacts {
            volumes: found.config.and_then(|c| c.volumes).unwrap_or_default(),
        }),
        Err(err) if client::is_not_found(&err) => Err(BackendError::ImageMissing {
            engine: engine.name,
            image: image.to_owned(),
            hint: hint(engine, image),
        }),
        Err(err) => Err(client::error("inspecting image", image, err)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_say_how_to_build_or_pull() {
        let pg = EngineRef::parse("postgres").expect("registered");
        assert!(hint(pg, "sandboxd-local/postgres:17").contains("scripts/build-images.sh"));
        let pull = hint(pg, "postgres:16-alpine");
        assert!(pull.contains("docker pull postgres:16-alpine"), "{pull}");
    }
}
