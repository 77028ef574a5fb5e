//! Spoofed floods from the lab's client: `tests/off_path/spray.py` sends them through
//! AF_PACKET on the client's link to the router, from addresses of the client's subnet that
//! nothing holds (the test blackholes them at the router, so no reply leaves the lab).

use std::net::IpAddr;

use crate::Lab;

/// What each spoofed flow sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SprayKind {
    /// One SYN (fresh sequence number, MSS 1460) to the TCP port.
    Syn,
    /// Two datagrams to the UDP port, one after the other.
    Udp2,
}

/// One flood: `sources` addresses from `prefix` + 1 up, `rate` frames a second for
/// `seconds`, to each of `vips` in turn on `port`.
#[derive(Debug, Clone)]
pub struct Spray<'a> {
    pub prefix: &'a str,
    pub sources: u32,
    pub kind: SprayKind,
    pub port: u16,
    pub rate: u32,
    pub seconds: f64,
    pub vips: Vec<IpAddr>,
}

impl Spray<'_> {
    /// Sends the flood from `lab`'s client and returns what the sender said ("sent N in S
    /// s"); panics when it did not run.
    pub fn send(&self, lab: &Lab) -> String {
        crate::netns::require_program("python3", "python3");
        let mac = |m: [u8; 6]| {
            m.iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(":")
        };
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/off_path/spray.py");
        let kind = match self.kind {
            SprayKind::Syn => "syn",
            SprayKind::Udp2 => "udp2",
        };
        let mut args = vec![
            "python3".to_string(),
            script.to_string(),
            "eth0".into(),
            mac(lab.client.mac("eth0")),
            mac(lab.router.mac("client")),
            self.prefix.into(),
            self.sources.to_string(),
            kind.into(),
            self.port.to_string(),
            self.rate.to_string(),
            self.seconds.to_string(),
        ];
        args.extend(self.vips.iter().map(IpAddr::to_string));
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let out = lab.client.output(&args);
        let said = String::from_utf8_lossy(&out.stdout).trim().to_string();
        assert!(
            out.status.success() && said.starts_with("sent "),
            "the {kind} flood did not run: {said} {}",
            String::from_utf8_lossy(&out.stderr)
        );
        said
    }
}
