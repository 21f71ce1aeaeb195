//! What sandboxd runs inside an instance's Pod for itself (never for an agent): a clone's
//! relation files padded to the source's sizes, through the API's `exec`.

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::AttachParams;
use sandboxd_domain::Instance;
use tokio::io::AsyncReadExt;

use super::spec::CONTAINER;
use super::{KubeBackend, client};
use crate::error::BackendError;

/// Only ever longer: `truncate -s` would shorten a file that grew meanwhile.
const PAD_SCRIPT: &str = "while [ $# -gt 1 ]; do size=$(stat -c %s \"$2\" 2>/dev/null || echo 0); \
     if [ \"$size\" -lt \"$1\" ]; then truncate -s \"$1\" \"$2\"; fi; shift 2; done";

impl KubeBackend {
    /// Runs `truncate -s` in the Pod's server container, as its own user, on each file.
    pub(super) async fn extend_in_pod(
        &self,
        instance: &Instance,
        files: &[(String, u64)],
    ) -> Result<(), BackendError> {
        if files.is_empty() {
            return Ok(());
        }
        let mut command = vec![
            "sh".to_owned(),
            "-ec".to_owned(),
            PAD_SCRIPT.to_owned(),
            "pad".to_owned(),
        ];
        for (path, length) in files {
            command.push(length.to_string());
            command.push(path.clone());
        }
        let pods: Api<Pod> = self.api().await?;
        let name = instance.name.as_str();
        let failed = |detail: String| BackendError::Kubernetes {
            operation: "padding the relation files of",
            name: name.to_owned(),
            detail,
        };
        let mut process = pods
            .exec(
                name,
                command,
                &AttachParams::default()
                    .container(CONTAINER)
                    .stdout(false)
                    .stderr(true),
            )
            .await
            .map_err(|err| client::error("padding the relation files of", name, err))?;
        let mut errors = String::new();
        if let Some(mut stderr) = process.stderr() {
            let _ = stderr.read_to_string(&mut errors).await;
        }
        let status = match process.take_status() {
            Some(status) => status.await,
            None => None,
        };
        process
            .join()
            .await
            .map_err(|err| failed(err.to_string()))?;
        match status {
            Some(status) if status.status.as_deref() == Some("Success") => Ok(()),
            Some(status) => Err(failed(format!(
                "{}: {}",
                status.message.unwrap_or_default(),
                errors.trim()
            ))),
            None => Err(failed(format!("no exit status: {}", errors.trim()))),
        }
    }
}
