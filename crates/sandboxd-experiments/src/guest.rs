//! The guest on disk: the component `scripts/build-guest.sh` built (a CPython interpreter that
//! runs the source it is handed), and its compiled form, cached beside the daemon's state.
//!
//! Compiling the 20 MB component takes seconds (a minute in a debug build), so it happens once
//! per (wasmtime version, engine configuration, guest) and the machine code is kept in a
//! `.cwasm` file; a run only instantiates it. Loading machine code is trusting it, so the cache
//! keeps the SHA-256 of every file it wrote and loads nothing whose bytes do not match.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};
use wasmtime::Engine;
use wasmtime::component::Component;

use crate::outcome::Unavailable;

/// The wasmtime this daemon embeds; part of every cache key.
pub const WASMTIME_VERSION: &str = "48.0.8";

/// Where the guest is and where its compiled form is kept.
#[derive(Debug, Clone)]
pub struct GuestFiles {
    /// The component (`experiment.wasm`).
    pub component: PathBuf,
    /// A directory of compiled guests, the daemon's own.
    pub cache_dir: PathBuf,
}

/// Why the cache could not give a compiled guest.
#[derive(Debug)]
pub(crate) enum Load {
    /// No compiled guest for this key yet: compile one.
    Missing,
    /// There was one, and it was unusable (removed, so the next attempt compiles).
    Corrupt(String),
}

impl GuestFiles {
    /// The component's bytes, or the refusal naming where it was looked for.
    pub(crate) fn read_component(&self) -> Result<Vec<u8>, Unavailable> {
        std::fs::read(&self.component).map_err(|_| Unavailable::GuestMissing {
            path: self.component.display().to_string(),
        })
    }

    /// The compiled guest's path for this engine and component.
    pub(crate) fn compiled_path(&self, engine: &Engine, component: &[u8]) -> PathBuf {
        let mut engine_hash = std::hash::DefaultHasher::new();
        engine
            .precompile_compatibility_hash()
            .hash(&mut engine_hash);
        let mut key = Sha256::new();
        key.update(WASMTIME_VERSION.as_bytes());
        key.update(engine_hash.finish().to_le_bytes());
        key.update(Sha256::digest(component));
        let key = hex::encode(key.finalize());
        self.cache_dir
            .join(format!("experiment-{}.cwasm", &key[..24]))
    }

    /// The compiled guest at `path`, if its bytes are the ones this cache wrote.
    pub(crate) fn load(&self, engine: &Engine, path: &Path) -> Result<Component, Load> {
        let bytes = match std::fs::read(path) {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == std::io::ErrorKind::NotFound => return Err(Load::Missing),
            Err(err) => return Err(self.discard(path, format!("reading it: {err}"))),
        };
        let recorded = std::fs::read_to_string(digest_path(path)).unwrap_or_default();
        if recorded.trim() != hex::encode(Sha256::digest(&bytes)) {
            return Err(self.discard(path, "its checksum does not match".to_owned()));
        }
        deserialize(engine, &bytes).map_err(|err| self.discard(path, err.to_string()))
    }

    /// Compiles the component and keeps the result (written whole, then renamed into place, so
    /// a reader never sees half a file).
    pub(crate) fn compile(
        &self,
        engine: &Engine,
        component: &[u8],
        path: &Path,
    ) -> Result<Component, Unavailable> {
        let failed = |detail: String| Unavailable::CompileFailed { detail };
        let compiled = engine
            .precompile_component(component)
            .map_err(|err| failed(format!("{err:#}")))?;
        std::fs::create_dir_all(&self.cache_dir)
            .map_err(|err| failed(format!("creating {}: {err}", self.cache_dir.display())))?;
        let staged = path.with_extension(format!("cwasm.{}.tmp", std::process::id()));
        let write = || -> std::io::Result<()> {
            std::fs::write(&staged, &compiled)?;
            std::fs::write(
                digest_path(path),
                hex::encode(Sha256::digest(&compiled)) + "\n",
            )?;
            std::fs::rename(&staged, path)
        };
        if let Err(err) = write() {
            let _ = std::fs::remove_file(&staged);
            return Err(failed(format!("writing {}: {err}", path.display())));
        }
        deserialize(engine, &compiled).map_err(|err| failed(format!("{err:#}")))
    }

    fn discard(&self, path: &Path, why: String) -> Load {
        tracing::warn!(path = %path.display(), why = %why, "discarding a compiled experiment guest");
        let _ = std::fs::remove_file(path);
        let _ = std::fs::remove_file(digest_path(path));
        Load::Corrupt(why)
    }
}

fn digest_path(path: &Path) -> PathBuf {
    path.with_extension("cwasm.sha256")
}

/// Machine code from `bytes`. They are this cache's own output, checked against the digest it
/// recorded (or just compiled), and wasmtime itself refuses code from another version or
/// configuration; a file that passes both is one this engine wrote.
#[allow(unsafe_code)]
fn deserialize(engine: &Engine, bytes: &[u8]) -> wasmtime::Result<Component> {
    // SAFETY: see above: the bytes are `Engine::precompile_component`'s output for this engine.
    unsafe { Component::deserialize(engine, bytes) }
}
