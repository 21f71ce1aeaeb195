//! The `sandboxd` binary: everything lives in the library so tests can drive it.

fn main() -> std::process::ExitCode {
    sandboxd::cli::main()
}
