//! The process's exit codes, shared by the command line, the commands and the admin client.

/// Exit codes: 0 success, 1 failure, 2 the caller's input was refused.
pub const EXIT_INPUT: u8 = 2;
