//! The lab's backends: one Python process per backend namespace (backend.py) serving HTTP
//! (`/whoami`, `/blob`) and UDP echo on the ports and VIPs the modes need.

use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::netns::{LabError, Result};
use crate::{Lab, LabMode, backend_addr};

const BACKEND_PY: &str = include_str!("backend.py");

impl Lab {
    /// Writes the backend server script and starts every backend.
    pub(crate) fn start_backends(&mut self) -> Result<()> {
        let script = self.dir.join("backend.py");
        std::fs::write(&script, BACKEND_PY).map_err(|e| LabError {
            command: format!("write {}", script.display()),
            detail: e.to_string(),
        })?;
        for i in 0..self.backends.len() {
            self.start_backend(i)?;
        }
        Ok(())
    }

    /// Starts backend `i`'s servers (again) and waits until they listen.
    pub fn start_backend(&mut self, i: usize) -> Result<()> {
        let script = self.dir.join("backend.py").to_string_lossy().into_owned();
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join(format!("be{}.log", i + 1)))
            .ok();
        let vips: Vec<String> = [LabMode::Dr, LabMode::Vxlan]
            .iter()
            .flat_map(|m| [m.vip(false).to_string(), m.vip(true).to_string()])
            .collect();
        let be = &self.backends[i];
        let child = be.try_spawn(
            &[
                "python3",
                &script,
                &format!("be{}", i + 1),
                "80,8080",
                &vips.join(","),
            ],
            log,
        )?;
        self.servers.resize_with(self.backends.len(), || None);
        self.servers[i] = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        let addr: SocketAddr = format!("{}:8080", backend_addr(i, false))
            .parse()
            .expect("literal");
        let ok = be
            .in_thread(move || {
                loop {
                    if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                        return true;
                    }
                    if Instant::now() > deadline {
                        return false;
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
            })?
            .join()
            .unwrap_or(false);
        if !ok {
            return Err(LabError {
                command: format!("backend be{}", i + 1),
                detail: "did not start listening within 20 s (see its log)".into(),
            });
        }
        Ok(())
    }

    /// Stops backend `i`'s servers (its namespace and addresses stay).
    pub fn stop_backend(&mut self, i: usize) {
        if let Some(mut c) = self.servers.get_mut(i).and_then(Option::take) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}
