//! Tools sandboxd runs for itself, not for an agent: `pg_dump` of a clone source in a throwaway
//! container of the source's major version, and the padding of a clone's relation files inside
//! its own container. The source's DSN reaches `pg_dump` on its stdin, never in a container's
//! config, and no error quotes it; so do the roots its `sslmode` trusts, so `pg_dump` checks
//! production's certificate exactly as the snapshot's own connection does.

use std::collections::HashMap;
use std::time::Duration;

use bollard::Docker;
use bollard::exec::{CreateExecOptions, StartExecResults};
use bollard::models::{ContainerCreateBody, HostConfig};
use bollard::query_parameters::{
    AttachContainerOptions, CreateContainerOptions, RemoveContainerOptions, WaitContainerOptions,
};
use futures::StreamExt;
use sandboxd_domain::{EngineRef, Instance, generate_secret};
use secrecy::{ExposeSecret, SecretString};
use tokio::io::AsyncWriteExt;

use super::{DockerBackend, client, images};
use crate::clone::{LibpqInput, libpq_input};
use crate::error::BackendError;

/// How long a schema dump may take.
const DUMP_DEADLINE: Duration = Duration::from_secs(300);
/// The most schema text kept (a schema larger than this is refused, not cut).
const DUMP_MAX_BYTES: usize = 64 << 20;

/// Where the dump's script writes the roots a verifying `sslmode` trusts (its `/tmp` is a
/// tmpfs of its own).
const ROOT_FILE: &str = "/tmp/sandboxd-root.crt";

/// The dump's command: the connection parameters (no password; `sslmode` and, when it
/// verifies, `sslrootcert` included), then the password, then the roots as PEM (the rest, empty
/// when the mode checks no certificate) are read from stdin, so none is in a config the engine
/// records, and the password is in pg_dump's environment (readable by its own user only), never
/// on its command line (readable by all).
const DUMP_SCRIPT: &str = "IFS= read -r params; IFS= read -r PGPASSWORD || true; \
     [ -n \"$PGPASSWORD\" ] && export PGPASSWORD || unset PGPASSWORD; \
     cat > /tmp/sandboxd-root.crt; \
     exec pg_dump --schema-only --no-owner --no-privileges --no-publications \
     --no-subscriptions --no-security-labels --no-tablespaces --dbname=\"$params\"";

impl DockerBackend {
    pub(super) async fn run_schema_dump(
        &self,
        engine: EngineRef,
        major: u32,
        dsn: &SecretString,
    ) -> Result<String, BackendError> {
        let name = format!(
            "sandboxd-pgdump-{}",
            &generate_secret().expose_secret()[..12]
        );
        // Before anything is made: a DSN or a CA file that cannot be used fails here.
        let source = libpq_input(dsn, ROOT_FILE).map_err(|err| BackendError::Docker {
            operation: "handing the source to",
            name: name.clone(),
            detail: err.to_string(),
        })?;
        let docker = self.client.get().await?;
        let (image, _) =
            images::resolve(docker, engine, &self.config.images_for_major(engine, major)).await?;
        // The source is where the daemon can reach it: the operator's network when one is
        // configured, else the host's.
        let network_mode = self
            .config
            .network
            .clone()
            .unwrap_or_else(|| "host".to_owned());
        let body = ContainerCreateBody {
            image: Some(image.clone()),
            entrypoint: Some(vec!["sh".into(), "-c".into(), DUMP_SCRIPT.into()]),
            // A source that does not answer fails in seconds, not at the dump's deadline.
            env: Some(vec!["PGCONNECT_TIMEOUT=10".into()]),
            cmd: Some(vec![]),
            open_stdin: Some(true),
            stdin_once: Some(true),
            attach_stdin: Some(true),
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            labels: Some(HashMap::from([(
                format!("{}.tool", self.config.label_namespace),
                "pg_dump".to_owned(),
            )])),
            host_config: Some(HostConfig {
                network_mode: Some(network_mode),
                readonly_rootfs: Some(true),
                tmpfs: Some(HashMap::from([(
                    "/tmp".to_owned(),
                    "rw,nosuid,nodev,noexec,size=16m".to_owned(),
                )])),
                cap_drop: Some(vec!["ALL".into()]),
                security_opt: Some(vec!["no-new-privileges".into()]),
                memory: Some(i64::try_from(self.config.memory_mb << 20).unwrap_or(i64::MAX)),
                pids_limit: Some(self.config.pids_limit),
                ..HostConfig::default()
            }),
            ..ContainerCreateBody::default()
        };
        docker
            .create_container(
                Some(CreateContainerOptions {
                    name: Some(name.clone()),
                    ..CreateContainerOptions::default()
                }),
                body,
            )
            .await
            .map_err(|err| client::error("creating", &name, err))?;
        let outcome = tokio::time::timeout(DUMP_DEADLINE, dump(docker, &name, &source, dsn)).await;
        let removed = docker
            .remove_container(
                &name,
                Some(RemoveContainerOptions {
                    force: true,
                    ..RemoveContainerOptions::default()
                }),
            )
            .await;
        if let Err(err) = removed
            && !client::is_not_found(&err)
        {
            tracing::warn!(container = %name, error = %err, "removing the pg_dump container");
        }
        match outcome {
            Ok(result) => result,
            Err(_) => Err(BackendError::Docker {
                operation: "dumping the schema in",
                name,
                detail: format!("pg_dump took longer than {}s", DUMP_DEADLINE.as_secs()),
            }),
        }
    }

    /// Runs `truncate -s` inside the instance's container, as its own user, on each file.
    pub(super) async fn extend_in_container(
        &self,
        instance: &Instance,
        files: &[(String, u64)],
    ) -> Result<(), BackendError> {
        if files.is_empty() {
            return Ok(());
        }
        let docker = self.client.get().await?;
        let mut cmd = vec![
            "sh".to_owned(),
            "-ec".to_owned(),
            // Only ever longer: `truncate -s` would shorten a file that grew meanwhile.
            "while [ $# -gt 1 ]; do size=$(stat -c %s \"$2\" 2>/dev/null || echo 0); \
             if [ \"$size\" -lt \"$1\" ]; then truncate -s \"$1\" \"$2\"; fi; shift 2; done"
                .to_owned(),
            "pad".to_owned(),
        ];
        for (path, length) in files {
            cmd.push(length.to_string());
            cmd.push(path.clone());
        }
        let exec = docker
            .create_exec(
                &instance.backend_id,
                CreateExecOptions {
                    attach_stdout: Some(true),
                    attach_stderr: Some(true),
                    cmd: Some(cmd),
                    ..CreateExecOptions::default()
                },
            )
            .await
            .map_err(|err| client::error("padding the relation files of", &instance.name, err))?;
        let mut errors = String::new();
        if let StartExecResults::Attached { mut output, .. } = docker
            .start_exec(&exec.id, None)
            .await
            .map_err(|err| client::error("padding the relation files of", &instance.name, err))?
        {
            while let Some(chunk) = output.next().await {
                if let Ok(bollard::container::LogOutput::StdErr { message }) = chunk {
                    errors.push_str(&String::from_utf8_lossy(&message));
                }
            }
        }
        let inspected = docker
            .inspect_exec(&exec.id)
            .await
            .map_err(|err| client::error("padding the relation files of", &instance.name, err))?;
        match inspected.exit_code {
            Some(0) => Ok(()),
            code => Err(BackendError::Docker {
                operation: "padding the relation files of",
                name: instance.name.clone(),
                detail: format!("exit code {code:?}: {}", errors.trim()),
            }),
        }
    }
}

async fn dump(
    docker: &Docker,
    name: &str,
    source: &LibpqInput,
    dsn: &SecretString,
) -> Result<String, BackendError> {
    let attached = docker
        .attach_container(
            name,
            Some(AttachContainerOptions {
                stdin: true,
                stdout: true,
                stderr: true,
                stream: true,
                ..AttachContainerOptions::default()
            }),
        )
        .await
        .map_err(|err| client::error("attaching to", name, err))?;
    docker
        .start_container(name, None)
        .await
        .map_err(|err| client::error("starting", name, err))?;
    let bollard::container::AttachContainerResults {
        mut output,
        mut input,
    } = attached;
    let written = async {
        input.write_all(source.params.as_bytes()).await?;
        input.write_all(b"\n").await?;
        if let Some(password) = &source.password {
            input.write_all(password.expose_secret().as_bytes()).await?;
        }
        input.write_all(b"\n").await?;
        if let Some(roots) = &source.roots_pem {
            input.write_all(roots.as_bytes()).await?;
        }
        input.flush().await?;
        input.shutdown().await
    }
    .await;
    drop(input);
    written.map_err(|err| BackendError::Docker {
        operation: "handing the source to",
        name: name.to_owned(),
        detail: format!("writing to its stdin failed: {err}"),
    })?;
    let (mut schema, mut errors) = (Vec::new(), Vec::new());
    while let Some(chunk) = output.next().await {
        match chunk {
            Ok(bollard::container::LogOutput::StdOut { message }) => {
                schema.extend_from_slice(&message);
                if schema.len() > DUMP_MAX_BYTES {
                    return Err(BackendError::Docker {
                        operation: "dumping the schema in",
                        name: name.to_owned(),
                        detail: format!("the schema is larger than {} MiB", DUMP_MAX_BYTES >> 20),
                    });
                }
            }
            Ok(bollard::container::LogOutput::StdErr { message }) => {
                if errors.len() < 8192 {
                    errors.extend_from_slice(&message);
                }
            }
            Ok(_) => {}
            Err(err) => return Err(client::error("reading the output of", name, err)),
        }
    }
    let status = docker
        .wait_container(name, None::<WaitContainerOptions>)
        .next()
        .await;
    let code = match status {
        Some(Ok(done)) => done.status_code,
        // The engine reports a non-zero exit as an error carrying the code.
        Some(Err(bollard::errors::Error::DockerContainerWaitError { code, .. })) => code,
        Some(Err(err)) => return Err(client::error("waiting for", name, err)),
        None => -1,
    };
    if code != 0 {
        let text = crate::clone::redact(&String::from_utf8_lossy(&errors), dsn);
        return Err(BackendError::Docker {
            operation: "dumping the schema in",
            name: name.to_owned(),
            detail: format!(
                "pg_dump exited with {code} ({}): {}",
                source.tls,
                text.trim()
            ),
        });
    }
    String::from_utf8(schema).map_err(|_| BackendError::Docker {
        operation: "dumping the schema in",
        name: name.to_owned(),
        detail: "pg_dump wrote something that is not UTF-8".to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_script_writes_the_roots_where_libpq_is_told_they_are() {
        assert!(DUMP_SCRIPT.contains(&format!("cat > {ROOT_FILE};")));
        // The password stays off the command line: only the parameters are an argument.
        assert!(DUMP_SCRIPT.contains("--dbname=\"$params\""));
    }
}
