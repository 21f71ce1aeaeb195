//! The local images every Docker scenario runs, and the Docker backend's settings for them.

use std::collections::BTreeMap;

use sandboxd_backend::docker::DockerConfig;

/// Local images: nothing can be pulled on this machine.
/// The Docker backend's settings for the local images, nothing else changed but `tweak`.
pub fn local_config(tweak: impl FnOnce(&mut DockerConfig)) -> DockerConfig {
    let mut config = DockerConfig {
        images: local_images()
            .into_iter()
            .map(|(engine, image)| (engine, vec![image]))
            .collect(),
        ..DockerConfig::default()
    };
    tweak(&mut config);
    config
}

pub fn local_images() -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "postgres".to_owned(),
            "sandboxd-local/postgres:17".to_owned(),
        ),
        ("redis".to_owned(), "sandboxd-local/redis:8".to_owned()),
        ("mariadb".to_owned(), "sandboxd-local/mariadb:11".to_owned()),
    ])
}
