//! systemd's readiness protocol (`sd_notify`): under `Type=notify` the service manager
//! starts units ordered after sluice only once sluice says READY=1, which it does when the
//! datapath forwards and the API answers. Without it, a unit had to poll the journal for the
//! "sluice running" line, which costs seconds of boot under emulation. Outside systemd
//! (`NOTIFY_SOCKET` unset) every call does nothing.

use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};

use tracing::warn;

/// Sends `state` (newline-separated `KEY=value` lines, e.g. `READY=1`) to the service
/// manager, if sluice runs under one. A failure is logged once per call, never fatal: the
/// unit's start timeout tells the operator the rest.
pub fn notify(state: &str) {
    let Some(socket) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    if let Err(e) = send(&socket.to_string_lossy(), state) {
        warn!(socket = %socket.to_string_lossy(), "cannot tell systemd {state:?}: {e}");
    }
}

fn send(socket: &str, state: &str) -> std::io::Result<()> {
    // '@' names a socket in the abstract namespace; anything else is a path.
    let addr = match socket.strip_prefix('@') {
        Some(name) => SocketAddr::from_abstract_name(name.as_bytes())?,
        None => SocketAddr::from_pathname(socket)?,
    };
    let sock = UnixDatagram::unbound()?;
    sock.send_to_addr(state.as_bytes(), &addr)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sends_to_a_path_and_to_an_abstract_socket() {
        let path = std::env::temp_dir().join(format!("sluice-notify-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        let rx = UnixDatagram::bind(&path).unwrap();
        send(path.to_str().unwrap(), "READY=1").unwrap();
        let mut buf = [0u8; 64];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
        std::fs::remove_file(&path).unwrap();

        let name = format!("sluice-notify-test-{}", std::process::id());
        let addr = SocketAddr::from_abstract_name(name.as_bytes()).unwrap();
        let rx = UnixDatagram::bind_addr(&addr).unwrap();
        send(&format!("@{name}"), "STOPPING=1").unwrap();
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"STOPPING=1");
    }

    #[test]
    fn a_missing_socket_is_an_error_not_a_panic() {
        assert!(send("/nonexistent/sluice-notify", "READY=1").is_err());
    }
}
