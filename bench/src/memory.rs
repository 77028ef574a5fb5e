//! What the appliance's flows cost in memory, as the kernel accounts it: the process's
//! resident memory (the engine's connection tables live there) and the BPF maps it holds
//! (the flow cache is an LRU hash in the kernel), each map's bytes from the `memlock` line
//! of its fd's `/proc/PID/fdinfo` entry and its name from the kernel's map list. The API
//! reports entry counts, not bytes, so the many-flows bench reads these.

use serde::Serialize;

/// One BPF map of a process.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MapMemory {
    /// The kernel's id of the map.
    pub id: u32,
    /// Its name (the first 15 bytes of the C name).
    pub name: String,
    /// Its capacity.
    pub max_entries: u32,
    /// Kernel memory charged to it, bytes.
    pub bytes: u64,
}

impl MapMemory {
    /// Bytes per entry of capacity (hash maps preallocate every entry).
    pub fn bytes_per_entry(&self) -> f64 {
        self.bytes as f64 / f64::from(self.max_entries.max(1))
    }
}

/// `VmRSS` of `/proc/PID/status`, bytes.
pub fn rss_bytes(pid: u32) -> Option<u64> {
    parse_vm_rss(&std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?)
}

/// The `VmRSS:` line of a `/proc/PID/status` text, in bytes.
pub fn parse_vm_rss(status: &str) -> Option<u64> {
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// The `map_id` and `memlock` of one fdinfo text, when the fd is a BPF map.
pub fn parse_map_fdinfo(text: &str) -> Option<(u32, u64)> {
    let field = |key: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(key))
            .map(str::trim)
    };
    let id = field("map_id:")?.parse().ok()?;
    let bytes = field("memlock:")?.parse().ok()?;
    Some((id, bytes))
}

/// Every BPF map process `pid` holds an fd of (each once), with its name and capacity.
pub fn bpf_maps(pid: u32) -> Vec<MapMemory> {
    let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fdinfo")) else {
        return Vec::new();
    };
    let mut held: Vec<(u32, u64)> = dir
        .flatten()
        .filter_map(|e| parse_map_fdinfo(&std::fs::read_to_string(e.path()).ok()?))
        .collect();
    held.sort_unstable();
    held.dedup_by_key(|(id, _)| *id);
    libbpf_rs::query::MapInfoIter::default()
        .filter_map(|info| {
            let (_, bytes) = held.iter().find(|(id, _)| *id == info.id)?;
            Some(MapMemory {
                id: info.id,
                name: info.name.to_string_lossy().into_owned(),
                max_entries: info.max_entries,
                bytes: *bytes,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rss_and_map_fdinfo() {
        let status = "Name:\tsluice\nVmPeak:\t  900 kB\nVmRSS:\t   12345 kB\nThreads:\t9\n";
        assert_eq!(parse_vm_rss(status), Some(12345 * 1024));
        assert_eq!(parse_vm_rss("Name:\tx\n"), None);
        let map = "pos:\t0\nflags:\t02000002\nmnt_id:\t15\nino:\t1058\nmap_type:\t9\n\
                   key_size:\t16\nvalue_size:\t56\nmax_entries:\t262144\nmap_flags:\t0x0\n\
                   map_extra:\t0x0\nmemlock:\t23068672\nmap_id:\t812\nfrozen:\t0\n";
        assert_eq!(parse_map_fdinfo(map), Some((812, 23_068_672)));
        // A socket's fdinfo is no map.
        assert_eq!(parse_map_fdinfo("pos:\t0\nflags:\t02\nmnt_id:\t9\n"), None);
        let m = MapMemory {
            id: 1,
            name: "flow_cache4".into(),
            max_entries: 262_144,
            bytes: 23_068_672,
        };
        assert_eq!(m.bytes_per_entry(), 88.0);
    }
}
