//! The XDP program's copy of every VIP's `allow` and `deny` lists (bpf/acl.h): list ids,
//! trie entries and drop-counter slots.
//!
//! A VIP's lists get an id of their own for as long as they stay the same; a change gives
//! the VIP a new id whose entries are all written before the VIP's steering key points at
//! it, and the old id's entries go only after (see [`AclState::write`] and
//! [`AclState::retire`]), so a frame never meets half a change. Counter slots belong to a
//! (VIP, list) pair and are never handed to another pair while this process runs, so the
//! program's counts keep their meaning across commits.

use std::collections::{HashMap, HashSet};

use libbpf_rs::{MapCore, MapFlags};

use super::super::abi::{acl_key4, acl_key6, acl_val, acl_verdict, maps};
use super::{Steer, bpf_err};
use crate::config::SourceAcl;
use crate::datapath::DatapathError;
use crate::lb::hash::addr_to_u128;

pub use crate::lb::steering::AclKey;

/// Frames the program dropped per (VIP, list).
pub type AclDrops = Vec<((String, String), u64)>;

/// The largest list id (ids are 16 bits in `steer_val.acl`; 0 means none).
const MAX_ID: u16 = u16::MAX;

/// What the program's ACL maps hold.
#[derive(Debug, Default)]
pub(super) struct AclState {
    /// Each live id: the VIP and lists it stands for, and the trie keys written for it.
    live: HashMap<u16, Live>,
    /// Counter slots by (VIP, list).
    counters: HashMap<(String, String), u16>,
    /// The id handed out last.
    last: u16,
}

#[derive(Debug)]
struct Live {
    vip: String,
    acl: SourceAcl,
    /// (IPv6, key bytes) of every entry.
    keys: Vec<(bool, Vec<u8>)>,
}

/// A trie key: the id, then `len` bits of `addr` (network order).
fn key(id: u16, v6: bool, addr: u128, len: u8) -> Vec<u8> {
    let id = u32::from(id).to_be();
    if v6 {
        acl_key6 {
            prefixlen: 32 + u32::from(len),
            id,
            addr: addr.to_be_bytes(),
        }
        .to_bytes()
        .to_vec()
    } else {
        let mut a = [0u8; 4];
        a.copy_from_slice(&addr.to_be_bytes()[12..]);
        acl_key4 {
            prefixlen: 32 + u32::from(len),
            id,
            addr: a,
        }
        .to_bytes()
        .to_vec()
    }
}

impl AclState {
    /// The id of every VIP slot in `want` whose lists the program holds, after writing the
    /// entries of every new one. On failure nothing new stays written.
    pub(super) fn write(
        &mut self,
        steer: &Steer,
        want: &[AclKey],
    ) -> Result<HashMap<u32, u16>, DatapathError> {
        let mut ids = HashMap::new();
        let mut fresh: Vec<u16> = Vec::new();
        for k in want {
            let found = self
                .live
                .iter()
                .find(|(_, l)| l.vip == k.vip && l.acl == k.acl)
                .map(|(id, _)| *id);
            let id = match found {
                Some(id) => id,
                None => match self.add(steer, k) {
                    Ok(id) => {
                        fresh.push(id);
                        id
                    }
                    Err(e) => {
                        for id in fresh {
                            self.remove(steer, id);
                        }
                        return Err(e);
                    }
                },
            };
            ids.insert(k.slot, id);
        }
        Ok(ids)
    }

    /// Deletes the entries of every id not in `keep` (after the steering keys moved on).
    pub(super) fn retire(&mut self, steer: &Steer, keep: &HashSet<u16>) {
        let gone: Vec<u16> = self
            .live
            .keys()
            .filter(|id| !keep.contains(id))
            .copied()
            .collect();
        for id in gone {
            self.remove(steer, id);
        }
    }

    fn remove(&mut self, steer: &Steer, id: u16) {
        let Some(l) = self.live.remove(&id) else {
            return;
        };
        for (v6, k) in l.keys {
            let def = if v6 { maps::ACL6 } else { maps::ACL4 };
            if let Ok(m) = steer.map(def) {
                // A key that is already gone is what we wanted.
                let _ = m.delete(&k);
            }
        }
    }

    /// A free id, never 0 nor a live one.
    fn next_id(&mut self) -> Option<u16> {
        for _ in 0..MAX_ID {
            self.last = if self.last == MAX_ID {
                1
            } else {
                self.last + 1
            };
            if !self.live.contains_key(&self.last) {
                return Some(self.last);
            }
        }
        None
    }

    /// The counter slot of (VIP, list), given on first use.
    fn counter(&mut self, vip: &str, list: &str) -> Result<u16, DatapathError> {
        let key = (vip.to_string(), list.to_string());
        if let Some(c) = self.counters.get(&key) {
            return Ok(*c);
        }
        let n = self.counters.len();
        if n >= maps::ACL_DROPS.entries as usize {
            return Err(DatapathError::AclFull {
                what: "drop counters (one per VIP and list)",
            });
        }
        self.counters.insert(key, n as u16);
        Ok(n as u16)
    }

    /// Writes one VIP's entries under a new id.
    fn add(&mut self, steer: &Steer, k: &AclKey) -> Result<u16, DatapathError> {
        let id = self
            .next_id()
            .ok_or(DatapathError::AclFull { what: "list ids" })?;
        let v6 = k.v6;
        let mut entries: Vec<(bool, Vec<u8>, acl_val)> = Vec::new();
        for r in &k.acl.rules {
            let r6 = r.prefix.addr.is_ipv6();
            let counter = if r.allow {
                0
            } else {
                self.counter(&k.vip, &r.list)?
            };
            let verdict = if r.allow {
                acl_verdict::ACL_ALLOW
            } else {
                acl_verdict::ACL_DENY
            };
            let a = addr_to_u128(r.prefix.addr);
            let val = acl_val {
                verdict,
                counter,
                ..Default::default()
            };
            entries.push((r6, key(id, r6, a, r.prefix.len), val));
        }
        // A rule of length 0 matches every source: it decides, and its trie key is the
        // default entry's (the id alone), which must not overwrite it.
        let everything = k
            .acl
            .rules
            .iter()
            .any(|r| r.prefix.len == 0 && r.prefix.addr.is_ipv6() == v6);
        if k.acl.default_deny && !everything {
            let counter = self.counter(&k.vip, "allow")?;
            let val = acl_val {
                verdict: acl_verdict::ACL_DENY,
                counter,
                ..Default::default()
            };
            // The id alone (length 0 of the source): a VIP of one family needs only its own.
            entries.push((v6, key(id, v6, 0, 0), val));
        }
        let mut live = Live {
            vip: k.vip.clone(),
            acl: k.acl.clone(),
            keys: Vec::new(),
        };
        for (e6, kb, val) in entries {
            let def = if e6 { maps::ACL6 } else { maps::ACL4 };
            let res = steer.map(def).and_then(|m| {
                m.update(&kb, &val.to_bytes(), MapFlags::ANY)
                    .map_err(|e| bpf_err("adding an allow or deny rule (map full?)", e))
            });
            if let Err(e) = res {
                self.live.insert(id, live);
                self.remove(steer, id);
                return Err(e);
            }
            live.keys.push((e6, kb));
        }
        self.live.insert(id, live);
        Ok(id)
    }

    /// The counter slots in use: (VIP, list) by slot.
    pub(super) fn slots(&self) -> Vec<(u16, (String, String))> {
        let mut v: Vec<(u16, (String, String))> =
            self.counters.iter().map(|(k, s)| (*s, k.clone())).collect();
        v.sort();
        v
    }
}
