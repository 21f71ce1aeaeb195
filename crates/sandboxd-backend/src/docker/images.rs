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
    /// The image's content id (`sha256:…`): a rebuilt image under the same tag has a new one.
    pub id: String,
    /// The server version the image declares (`17.6`), for `doctor`.
    pub version: Option<String>,
}

/// How to get `image` onto the engine.
pub(super) fn hint(engine: EngineRef, image: &str) -> String {
    if image.starts_with(LOCAL_PREFIX) {
        "build it with scripts/build-images.sh (it builds every sandboxd-local image from \
         Debian's packages, no registry needed)"
            .to_owned()
    } else if let Some(local) = engine.images.iter().find(|i| i.starts_with(LOCAL_PREFIX)) {
        format!(
            "pull it with `docker pull {image}` (sandboxd never pulls by itself); where no \
             registry is reachable, build {local} with scripts/build-images.sh (used when \
             present, or set [engines.{}] image = \"{local}\")",
            engine.name
        )
    } else {
        // scripts/build-images.sh builds no image of this engine: a registry is the only way.
        format!(
            "pull it with `docker pull {image}` where a registry is reachable (sandboxd never \
             pulls by itself); scripts/build-images.sh builds no {} image",
            engine.title
        )
    }
}

/// How to get any of `images` onto the engine: every way, the local build first (it needs no
/// registry).
pub(super) fn hint_any(engine: EngineRef, images: &[String]) -> String {
    let mut hints: Vec<String> = images.iter().map(|i| hint(engine, i)).collect();
    hints.sort_by_key(|h| !h.starts_with("build"));
    hints.dedup();
    hints.join("; or ")
}

/// The image that runs `engine`: the first of `images` present on the engine, and its facts;
/// `ImageMissing` naming every candidate and how to get one when none is.
pub(super) async fn resolve(
    docker: &Docker,
    engine: EngineRef,
    images: &[String],
) -> Result<(String, ImageFacts), BackendError> {
    for image in images {
        match docker.inspect_image(image).await {
            // Podman resolves a short name to any local image whose name ends like it
            // (`mariadb:11` finds `localhost/sandboxd-local/mariadb:11`): only an image that
            // carries the name asked for counts as that image.
            Ok(found) if !carries(found.repo_tags.as_deref().unwrap_or_default(), image) => {
                continue;
            }
            Ok(found) => {
                let config = found.config.unwrap_or_default();
                let facts = ImageFacts {
                    id: found.id.unwrap_or_default(),
                    version: declared_version(&config),
                    volumes: config.volumes.unwrap_or_default(),
                };
                return Ok((image.clone(), facts));
            }
            Err(err) if client::is_not_found(&err) => continue,
            Err(err) => return Err(client::error("inspecting image", image, err)),
        }
    }
    Err(BackendError::ImageMissing {
        engine: engine.name,
        image: images.join(" or "),
        hint: hint_any(engine, images),
    })
}

/// The server version an image declares: its OCI version label (the local images, the official
/// `mariadb`), else the official images' own variable (`PG_VERSION`, `REDIS_VERSION`,
/// `MONGO_VERSION`, `MARIADB_VERSION`).
fn declared_version(config: &bollard::models::ImageConfig) -> Option<String> {
    const VARIABLES: &[&str] = &[
        "PG_VERSION",
        "REDIS_VERSION",
        "MONGO_VERSION",
        "MARIADB_VERSION",
    ];
    let label = config
        .labels
        .as_ref()
        .and_then(|labels| labels.get("org.opencontainers.image.version"))
        .and_then(|label| crate::versions::version_in(label));
    label.or_else(|| {
        config.env.iter().flatten().find_map(|variable| {
            let (name, value) = variable.split_once('=')?;
            VARIABLES
                .contains(&name)
                .then(|| crate::versions::version_in(value))
                .flatten()
        })
    })
}

/// `name` without the parts engines add by themselves: Docker's `docker.io/` and `library/`,
/// Podman's `localhost/` for a local image, and the default `:latest`.
fn normalized(name: &str) -> String {
    let bare = name.strip_prefix("docker.io/").unwrap_or(name);
    let bare = bare.strip_prefix("library/").unwrap_or(bare);
    let bare = bare.strip_prefix("localhost/").unwrap_or(bare);
    let last = bare.rsplit('/').next().unwrap_or(bare);
    if last.contains(':') || last.contains('@') {
        bare.to_owned()
    } else {
        format!("{bare}:latest")
    }
}

/// Whether an image tagged `tags` is the image `wanted` names. A reference by digest is taken
/// as it is: the engine found exactly that content.
fn carries(tags: &[String], wanted: &str) -> bool {
    wanted.contains('@') || {
        let wanted = normalized(wanted);
        tags.iter().any(|tag| normalized(tag) == wanted)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_image_counts_only_under_the_name_it_carries() {
        let tags = |t: &[&str]| t.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>();
        // Docker's and Podman's spellings of the same names.
        assert!(carries(&tags(&["mariadb:11"]), "mariadb:11"));
        assert!(carries(
            &tags(&["docker.io/library/mariadb:11"]),
            "mariadb:11"
        ));
        assert!(carries(
            &tags(&["localhost/sandboxd-local/redis:8"]),
            "sandboxd-local/redis:8"
        ));
        assert!(carries(&tags(&["mine/pg"]), "mine/pg:latest"));
        // Podman's short-name match of another image is not the official one.
        assert!(!carries(
            &tags(&["localhost/sandboxd-local/mariadb:11"]),
            "mariadb:11"
        ));
        assert!(!carries(&tags(&["postgres:17"]), "postgres:16-alpine"));
        assert!(!carries(&[], "redis:8-alpine"));
        assert!(carries(&[], "postgres@sha256:0123"));
    }

    #[test]
    fn hints_say_how_to_build_or_pull() {
        let pg = EngineRef::parse("postgres").expect("registered");
        assert!(hint(pg, "sandboxd-local/postgres:17").contains("scripts/build-images.sh"));
        let pull = hint(pg, "postgres:16-alpine");
        assert!(pull.contains("docker pull postgres:16-alpine"), "{pull}");
        let either = hint_any(
            pg,
            &[
                "postgres:16-alpine".into(),
                "sandboxd-local/postgres:17".into(),
            ],
        );
        assert!(either.starts_with("build it"), "{either}");
        assert!(
            either.contains("docker pull postgres:16-alpine"),
            "{either}"
        );
        // No local image of MongoDB is built: the hint says so rather than sending the
        // operator to the build script.
        let mongo = EngineRef::parse("mongo").expect("registered");
        let pull = hint_any(mongo, &["mongo:8".into()]);
        assert!(
            pull.starts_with("pull it with `docker pull mongo:8`"),
            "{pull}"
        );
        assert!(pull.contains("builds no MongoDB image"), "{pull}");
    }
}
