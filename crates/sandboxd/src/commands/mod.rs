//! One module per CLI command.

pub mod agents;
pub mod demo;
pub mod doctor;
pub mod janitor;
pub mod ls;
pub mod mcp;
pub mod projects;
pub mod provision;
pub mod sandboxes;
pub mod serve;
pub mod settings;
pub mod tasks;
pub mod teardown;

use std::process::ExitCode;

use sandboxd_backend::BackendError;

use crate::cli::EXIT_INPUT;

/// Prints an error and picks the exit code: 2 for refused input, 1 for anything else.
pub fn fail(err: &BackendError) -> ExitCode {
    eprintln!("error: {err}");
    match err {
        BackendError::Input(_) => ExitCode::from(EXIT_INPUT),
        _ => ExitCode::FAILURE,
    }
}
