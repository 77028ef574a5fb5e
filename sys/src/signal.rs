//! The default action for SIGPIPE, which Rust's runtime sets to "ignore" before `main`: a
//! short command whose reader went away (`sluice check ... | head -2`) then fails a write
//! and panics ("failed printing to stdout: Broken pipe"). Restored to the default, the
//! command ends quietly the way Unix tools do. Only for commands that write to their
//! standard output and own no sockets a peer may close under them (never `sluice run`).
#![allow(unsafe_code)]

/// Restores SIGPIPE's default action (terminate) for this process.
pub fn default_sigpipe() {
    // SAFETY: signal(2) with SIG_DFL installs no handler of ours; it only changes the
    // disposition of SIGPIPE, which nothing in the process relies on ignoring (the caller
    // only uses it for commands that do not serve sockets).
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}
