//! What one `sluice run` hands the next (a restart or an upgrade without a reset): the table
//! version it ran, the health verdicts its tables were built on (so the new process's first
//! rings are the old ones), and every worker's connection table as flow records in their
//! one wire form (`lb::conntrack::codec`).
//!
//! ```text
//! 0 magic "SLHO"   4 format u16   6 workers u16   8 table version u64   16 exported ns u64
//! 24 health count u32, then per verdict: name length u8, the VIP's name, family u8 (4 or
//!    6), the backend's address (4 or 16 bytes), port u16, up u8
//! then per worker: record bytes u32, then a flow-record batch
//! format 2 only: persistence entries u32, then per entry: key u64, value u64 (the shared
//!    persistence table's words, `lb::persist`: a client's backend token and deadline);
//!    then outbound VIPs u32, then per VIP (`lb::outbound::Carried`): name length u8, the
//!    name, range first u16, last u16, the pool in force (count u16, then per backend:
//!    family u8 and address), drain u8 (0 or 1), with 1: its end ns u64 and its pool
//! ```
//! Format 1 (no persistence entries) is still read: an older release hands over to this one.
//! A reader never guesses: another format, or a batch of another record version, is
//! refused with what it was, and the new process starts cold and says so.

use std::net::IpAddr;

use crate::lb::BackendId;
use crate::lb::conntrack::FlowRecord;
use crate::lb::conntrack::codec::{self, CodecError};
use crate::lb::outbound::{Carried, PortRange};

/// The first bytes of a bundle.
pub const MAGIC: [u8; 4] = *b"SLHO";
/// The layout this build writes (it reads this one and format 1).
pub const FORMAT: u16 = 2;

/// One process's state for the next.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Bundle {
    /// The table version the old process ran: the new one numbers on from it.
    pub version: u64,
    /// When it was written (`CLOCK_MONOTONIC`, ns).
    pub exported_ns: u64,
    /// The health verdicts the running tables were built on.
    pub health: Vec<(BackendId, bool)>,
    /// Each worker's flows, in worker order.
    pub workers: Vec<Vec<FlowRecord>>,
    /// The persistence table's live entries (key, value; see `lb::persist`).
    pub persistence: Vec<(u64, u64)>,
    /// The VIPs' outbound states (drains under way go on).
    pub outbound: Vec<Carried>,
}

/// Why a bundle was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BundleError {
    #[error("not a hand-over bundle (no SLHO magic)")]
    BadMagic,
    #[error("hand-over format {found}; this build reads formats 1 and {FORMAT}")]
    Format { found: u16 },
    #[error("hand-over cut short at byte {at}")]
    Truncated { at: usize },
    #[error("hand-over has bytes past its end, from byte {at}")]
    Trailing { at: usize },
    #[error("hand-over health verdict {index}: {what}")]
    BadVerdict { index: usize, what: &'static str },
    #[error("hand-over outbound state {index}: {what}")]
    BadOutbound { index: usize, what: &'static str },
    #[error("hand-over flows of worker {worker}: {source}")]
    Flows {
        worker: usize,
        #[source]
        source: CodecError,
    },
}

impl Bundle {
    /// Flows over every worker.
    pub fn flows(&self) -> usize {
        self.workers.iter().map(Vec::len).sum()
    }

    /// The bundle's bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(64 + self.flows() * codec::RECORD_LEN);
        out.extend_from_slice(&MAGIC);
        out.extend_from_slice(&FORMAT.to_le_bytes());
        out.extend_from_slice(&(self.workers.len() as u16).to_le_bytes());
        out.extend_from_slice(&self.version.to_le_bytes());
        out.extend_from_slice(&self.exported_ns.to_le_bytes());
        out.extend_from_slice(&(self.health.len() as u32).to_le_bytes());
        for (id, up) in &self.health {
            let name = &id.vip.as_bytes()[..id.vip.len().min(255)];
            out.push(name.len() as u8);
            out.extend_from_slice(name);
            put_addr(&mut out, &id.address);
            out.extend_from_slice(&id.port.to_le_bytes());
            out.push(u8::from(*up));
        }
        for w in &self.workers {
            let batch = codec::encode(w);
            out.extend_from_slice(&(batch.len() as u32).to_le_bytes());
            out.extend_from_slice(&batch);
        }
        out.extend_from_slice(&(self.persistence.len() as u32).to_le_bytes());
        for (k, v) in &self.persistence {
            out.extend_from_slice(&k.to_le_bytes());
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&(self.outbound.len() as u32).to_le_bytes());
        for c in &self.outbound {
            let name = &c.name.as_bytes()[..c.name.len().min(255)];
            out.push(name.len() as u8);
            out.extend_from_slice(name);
            out.extend_from_slice(&c.range.first.to_le_bytes());
            out.extend_from_slice(&c.range.last.to_le_bytes());
            put_pool(&mut out, &c.current);
            match &c.next {
                None => out.push(0),
                Some((pool, end)) => {
                    out.push(1);
                    out.extend_from_slice(&end.to_le_bytes());
                    put_pool(&mut out, pool);
                }
            }
        }
        out
    }

    /// The bundle in `b`.
    pub fn decode(b: &[u8]) -> Result<Bundle, BundleError> {
        let mut r = Reader { b, at: 0 };
        if r.take(4)? != MAGIC {
            return Err(BundleError::BadMagic);
        }
        let found = r.u16()?;
        if found != FORMAT && found != 1 {
            return Err(BundleError::Format { found });
        }
        let workers = usize::from(r.u16()?);
        let version = r.u64()?;
        let exported_ns = r.u64()?;
        let verdicts = r.u32()? as usize;
        let mut health = Vec::with_capacity(verdicts.min(1 << 20));
        for index in 0..verdicts {
            health.push(r.verdict(index)?);
        }
        let mut out = Vec::with_capacity(workers);
        for worker in 0..workers {
            let len = r.u32()? as usize;
            let batch = r.take(len)?;
            let (records, used) =
                codec::decode(batch).map_err(|source| BundleError::Flows { worker, source })?;
            if used != len {
                return Err(BundleError::Flows {
                    worker,
                    source: CodecError::Truncated {
                        need: len,
                        have: used,
                    },
                });
            }
            out.push(records);
        }
        let mut persistence = Vec::new();
        let mut outbound = Vec::new();
        if found >= 2 {
            let n = r.u32()? as usize;
            persistence.reserve(n.min(1 << 20));
            for _ in 0..n {
                persistence.push((r.u64()?, r.u64()?));
            }
            let n = r.u32()? as usize;
            for index in 0..n {
                outbound.push(r.outbound(index)?);
            }
        }
        if r.at != b.len() {
            return Err(BundleError::Trailing { at: r.at });
        }
        Ok(Bundle {
            version,
            exported_ns,
            health,
            workers: out,
            persistence,
            outbound,
        })
    }
}

/// A pool of addresses: count u16, then per address its family (4 or 6) and bytes.
fn put_pool(out: &mut Vec<u8>, pool: &[IpAddr]) {
    let n = pool.len().min(usize::from(u16::MAX));
    out.extend_from_slice(&(n as u16).to_le_bytes());
    for a in &pool[..n] {
        put_addr(out, a);
    }
}

fn put_addr(out: &mut Vec<u8>, a: &IpAddr) {
    match a {
        IpAddr::V4(a) => {
            out.push(4);
            out.extend_from_slice(&a.octets());
        }
        IpAddr::V6(a) => {
            out.push(6);
            out.extend_from_slice(&a.octets());
        }
    }
}

struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], BundleError> {
        let end = self.at.checked_add(n).filter(|e| *e <= self.b.len());
        let end = end.ok_or(BundleError::Truncated { at: self.at })?;
        let s = &self.b[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn u16(&mut self) -> Result<u16, BundleError> {
        let s = self.take(2)?;
        Ok(u16::from_le_bytes([s[0], s[1]]))
    }

    fn u32(&mut self) -> Result<u32, BundleError> {
        let s = self.take(4)?;
        Ok(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
    }

    fn u64(&mut self) -> Result<u64, BundleError> {
        let s = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(s);
        Ok(u64::from_le_bytes(a))
    }

    fn addr(&mut self) -> Result<Option<IpAddr>, BundleError> {
        Ok(match self.take(1)?[0] {
            4 => {
                let s = self.take(4)?;
                Some(IpAddr::from([s[0], s[1], s[2], s[3]]))
            }
            6 => {
                let mut a = [0u8; 16];
                a.copy_from_slice(self.take(16)?);
                Some(IpAddr::from(a))
            }
            _ => None,
        })
    }

    fn pool(&mut self, index: usize) -> Result<Vec<IpAddr>, BundleError> {
        let n = usize::from(self.u16()?);
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let a = self.addr()?.ok_or(BundleError::BadOutbound {
                index,
                what: "family is neither 4 nor 6",
            })?;
            out.push(a);
        }
        Ok(out)
    }

    fn outbound(&mut self, index: usize) -> Result<Carried, BundleError> {
        let bad = |what| BundleError::BadOutbound { index, what };
        let n = usize::from(self.take(1)?[0]);
        let name = std::str::from_utf8(self.take(n)?).map_err(|_| bad("name is not UTF-8"))?;
        let (first, last) = (self.u16()?, self.u16()?);
        let range = PortRange::new(first, last).ok_or(bad("range is empty or reversed"))?;
        let current = self.pool(index)?;
        let next = match self.take(1)?[0] {
            0 => None,
            1 => {
                let end = self.u64()?;
                Some((self.pool(index)?, end))
            }
            _ => return Err(bad("drain is neither 0 nor 1")),
        };
        Ok(Carried {
            name: name.to_string(),
            range,
            current,
            next,
        })
    }

    fn verdict(&mut self, index: usize) -> Result<(BackendId, bool), BundleError> {
        let bad = |what| BundleError::BadVerdict { index, what };
        let n = usize::from(self.take(1)?[0]);
        let name = std::str::from_utf8(self.take(n)?).map_err(|_| bad("name is not UTF-8"))?;
        let address = self.addr()?.ok_or(bad("family is neither 4 nor 6"))?;
        let port = self.u16()?;
        let up = match self.take(1)?[0] {
            0 => false,
            1 => true,
            _ => return Err(bad("up is neither 0 nor 1")),
        };
        Ok((BackendId::new(name, address, port), up))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lb::FlowKey;
    use crate::lb::conntrack::{Carry, Evidence, FlowState, Track};

    fn record(port: u16) -> FlowRecord {
        FlowRecord {
            key: FlowKey {
                src: 0xffff_c633_6407,
                dst: 0xffff_c000_020a,
                sport: port,
                dport: 80,
                proto: 6,
                v6: false,
                zone: 0,
            },
            backend: (0xffff_0a00_0015, 8080),
            state: FlowState::TcpEstablished,
            evidence: Evidence::default(),
            snat: None,
            carry: Carry::default(),
            track: Track::default(),
            age_ns: 5,
        }
    }

    fn sample() -> Bundle {
        Bundle {
            version: 41,
            exported_ns: 123,
            health: vec![
                (
                    BackendId::new("web", "10.0.0.21".parse().unwrap(), 8080),
                    true,
                ),
                (
                    BackendId::new("web6", "2001:db8::21".parse().unwrap(), 80),
                    false,
                ),
            ],
            workers: vec![vec![record(1000), record(1001)], vec![], vec![record(2000)]],
            persistence: Vec::new(),
            outbound: Vec::new(),
        }
    }

    /// [`sample`] with persistence entries: what format 2 adds.
    fn sample2() -> Bundle {
        Bundle {
            persistence: vec![(0x1234_5678_9abc_def0, 0xabcd_eff0_0000_7fff), (7, 9)],
            outbound: vec![
                Carried {
                    name: "out".into(),
                    range: PortRange::new(40000, 40999).unwrap(),
                    current: vec!["10.1.0.11".parse().unwrap(), "10.1.0.12".parse().unwrap()],
                    next: Some((vec!["2001:db8::13".parse().unwrap()], 99)),
                },
                Carried {
                    name: "still".into(),
                    range: PortRange::new(5, 5).unwrap(),
                    current: Vec::new(),
                    next: None,
                },
            ],
            ..sample()
        }
    }

    /// The committed format-1 bundle of [`sample`]: what a release of this format hands the
    /// next one (an upgrade reads it), so a build that changes the layout without a new
    /// format number fails here.
    const FORMAT_1: &str = include_str!("format1.hex");
    /// The committed format-2 bundle of [`sample2`].
    const FORMAT_2: &str = include_str!("format2.hex");

    fn unhex(s: &str) -> Vec<u8> {
        let s: String = s.split_whitespace().collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
            .collect()
    }

    #[test]
    fn a_format_1_bundle_of_an_earlier_release_still_reads_the_same() {
        let bytes = unhex(FORMAT_1);
        assert_eq!(Bundle::decode(&bytes), Ok(sample()));
    }

    #[test]
    fn a_format_2_bundle_reads_the_same_and_this_build_writes_it() {
        let bytes = unhex(FORMAT_2);
        assert_eq!(Bundle::decode(&bytes), Ok(sample2()));
        assert_eq!(sample2().encode(), bytes, "the layout of format 2 changed");
    }

    #[test]
    fn a_bundle_survives_its_bytes() {
        let b = sample2();
        if std::env::var_os("SLUICE_WRITE_FORMAT_FIXTURE").is_some() {
            let hex: Vec<String> = b
                .encode()
                .chunks(32)
                .map(|c| c.iter().map(|x| format!("{x:02x}")).collect())
                .collect();
            std::fs::write("src/control/takeover/format2.hex", hex.join("\n") + "\n")
                .expect("write the fixture");
        }
        assert_eq!(Bundle::decode(&b.encode()), Ok(b.clone()));
        assert_eq!(b.flows(), 3);
        let mut longer = b.encode();
        longer.push(0);
        assert!(matches!(
            Bundle::decode(&longer),
            Err(BundleError::Trailing { .. })
        ));
    }

    #[test]
    fn another_format_or_cut_bytes_are_refused_not_misread() {
        let bytes = sample().encode();
        let mut other = bytes.clone();
        other[4..6].copy_from_slice(&3u16.to_le_bytes());
        assert_eq!(
            Bundle::decode(&other),
            Err(BundleError::Format { found: 3 })
        );
        let mut magic = bytes.clone();
        magic[0] = b'X';
        assert_eq!(Bundle::decode(&magic), Err(BundleError::BadMagic));
        for cut in [3, 10, 30, bytes.len() - 1] {
            assert!(Bundle::decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        // A flow-record batch of another version inside: refused with the worker.
        let mut records = bytes.clone();
        let magic_at = records
            .windows(4)
            .position(|w| w == b"SLFR")
            .expect("a batch");
        records[magic_at + 4..magic_at + 6].copy_from_slice(&9u16.to_le_bytes());
        assert!(matches!(
            Bundle::decode(&records),
            Err(BundleError::Flows {
                worker: 0,
                source: CodecError::UnsupportedVersion { found: 9 }
            })
        ));
    }
}
