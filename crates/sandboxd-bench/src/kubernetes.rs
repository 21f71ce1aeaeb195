//! The Kubernetes backend (issue 11) beside the Docker backend, on the same images and machine:
//! a cold provision of postgres+redis (scheduled Pods started by the kubelet, proven by the same
//! authenticated round trips) and its teardown, alternated run by run. The cluster is the one
//! `scripts/k8s-cluster.sh up` runs (`--kubeconfig`, else `SANDBOXD_TEST_KUBECONFIG`); the run
//! works in a namespace of its own, deleted at the end with everything in it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use sandboxd_backend::docker::DockerBackend;
use sandboxd_backend::kube::{KubeBackend, KubeConfig};
use sandboxd_backend::{Backend, InstanceHandle, InstanceRequest, Sweep, provision_set};
use sandboxd_domain::{AgentSlug, DaemonId, EngineRef};

use crate::Report;
use crate::cleanup::Cleanup;
use crate::images::{local_config, local_images};
use crate::stats::Series;

/// `kubectl` of the test cluster, through the script that runs it.
fn kubectl(args: &[&str]) -> Result<()> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/k8s-cluster.sh");
    let out = std::process::Command::new(script)
        .arg("kubectl")
        .args(args)
        .output()
        .context("running kubectl")?;
    if !out.status.success() {
        bail!(
            "kubectl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

/// The namespace of this run, deleted (with everything in it) when dropped.
struct Namespace(String);

impl Drop for Namespace {
    fn drop(&mut self) {
        if let Err(err) = kubectl(&[
            "delete",
            "namespace",
            &self.0,
            "--wait=true",
            "--timeout=120s",
        ]) {
            eprintln!("removing namespace {}: {err:#}", self.0);
        }
    }
}

pub async fn kubernetes(
    kubeconfig: Option<PathBuf>,
    runs: usize,
    cleanup: &Cleanup,
    report: &mut Report,
) -> Result<()> {
    let Some(kubeconfig) =
        kubeconfig.or_else(|| std::env::var_os("SANDBOXD_TEST_KUBECONFIG").map(PathBuf::from))
    else {
        report.not_measured.push((
            "kubernetes: cold provision".into(),
            "no cluster: pass --kubeconfig (scripts/k8s-cluster.sh up; kubeconfig)".into(),
        ));
        return Ok(());
    };
    let namespace = Namespace(format!("sbx-bench-{}", cleanup.pid()));
    kubectl(&["create", "namespace", &namespace.0])?;
    let kube = KubeBackend::new(KubeConfig {
        kubeconfig: Some(kubeconfig),
        namespace: namespace.0.clone(),
        images: local_images()
            .into_iter()
            .map(|(engine, image)| (engine, vec![image]))
            .collect(),
        image_pull_policy: "Never".to_owned(),
        ..KubeConfig::default()
    })
    .context("kubernetes backend")?;
    kube.ping().await.context("the cluster answers")?;
    let docker = DockerBackend::new(local_config(|_| {})).context("docker backend")?;
    let set = [
        sandboxd_domain::engines::lookup("postgres")?,
        sandboxd_domain::engines::lookup("redis")?,
    ];
    let outcome = measure(&kube, &docker, &set, runs, cleanup, report).await;
    for listed in kube.list().await.unwrap_or_default() {
        let _ = kube.teardown(&listed.handle).await;
    }
    if let Err(err) = docker.sweep(&DaemonId::cli(), Sweep::Now).await {
        eprintln!("sweeping the docker network: {err}");
    }
    drop(namespace);
    outcome
}

fn requests(set: &[EngineRef], owner: &AgentSlug) -> Vec<InstanceRequest> {
    set.iter()
        .map(|engine| InstanceRequest {
            major: None,
            engine: *engine,
            owner: owner.clone(),
            maker: DaemonId::cli(),
            features: Default::default(),
            size: None,
        })
        .collect()
}

/// One provision of the set and its teardown on `backend`: (provision, teardown).
async fn one(
    backend: &dyn Backend,
    set: &[EngineRef],
    owner: &AgentSlug,
) -> Result<(Duration, Duration)> {
    let started = Instant::now();
    let instances = provision_set(backend, &requests(set, owner))
        .await
        .context("provision")?;
    let provisioned = started.elapsed();
    let started = Instant::now();
    for instance in &instances {
        backend.teardown(&InstanceHandle::of(instance)).await?;
    }
    Ok((provisioned, started.elapsed()))
}

async fn measure(
    kube: &KubeBackend,
    docker: &DockerBackend,
    set: &[EngineRef],
    runs: usize,
    cleanup: &Cleanup,
    report: &mut Report,
) -> Result<()> {
    let (mut kube_up, mut kube_down, mut docker_up, mut docker_down) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    // One untimed round each: the first pays for cold caches.
    for round in 0..=runs {
        let owner = AgentSlug::parse(&cleanup.owner(&format!("k8s-{round}")))?;
        let (up, down) = one(kube, set, &owner).await?;
        let owner = AgentSlug::parse(&cleanup.owner(&format!("dk-{round}")))?;
        let (dup, ddown) = one(docker, set, &owner).await?;
        if round > 0 {
            kube_up.push(up);
            kube_down.push(down);
            docker_up.push(dup);
            docker_down.push(ddown);
        }
    }
    let subject = "postgres+redis";
    let docker_cold =
        Series::from_samples("docker: cold provision (same images)", subject, docker_up);
    let kube_cold = Series::from_samples("kubernetes: cold provision (Pods)", subject, kube_up)
        .with_ratio("docker cold provision", &docker_cold);
    let docker_teardown = Series::from_samples("docker: teardown", subject, docker_down);
    let kube_teardown = Series::from_samples(
        "kubernetes: teardown (until the kubelet stopped it)",
        subject,
        kube_down,
    )
    .with_ratio("docker teardown", &docker_teardown);
    report
        .series
        .extend([kube_cold, docker_cold, kube_teardown, docker_teardown]);
    Ok(())
}
