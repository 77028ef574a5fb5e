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
    /// Its key and value sizes, bytes.
    pub key_size: u32,
    /// See `key_size`.
    pub value_size: u32,
    /// Kernel memory charged to it, bytes.
    pub bytes: u64,
}

impl MapMemory {
    /// Bytes per entry of capacity (hash maps preallocate every entry).
    pub fn bytes_per_entry(&self) -> f64 {
        self.bytes as f64 / f64::from(self.max_entries.max(1))
    }
}

/// Bytes of a cache line: one read of the chase in [`random_read_ns`] per line.
const LINE: usize = 64;
/// Reads [`random_read_ns`] times (each waits for the one before).
const CHASE_READS: usize = 4_000_000;

/// What one random read costs, in nanoseconds, in a buffer of `bytes` (at least two
/// lines): a chase along one cycle through every 64-byte line of the buffer in random order
/// (Sattolo's shuffle), so each read's address comes from the read before and no
/// prefetcher can guess it. The flow cache's lookups in a map of this size are reads of
/// this kind; the many-flows report prints both, so the memory a machine has behind its
/// caches explains what the cache does at many flows.
pub fn random_read_ns(bytes: usize) -> f64 {
    let lines = (bytes / LINE).max(2);
    let words = LINE / size_of::<u64>();
    let mut next = vec![0u64; lines * words];
    for (line, succ) in cycle(lines).into_iter().enumerate() {
        next[line * words] = succ;
    }
    let mut at = 0u64;
    let start = std::time::Instant::now();
    for _ in 0..CHASE_READS {
        at = next[at as usize * words];
    }
    let took = start.elapsed();
    std::hint::black_box(at);
    took.as_secs_f64() * 1e9 / CHASE_READS as f64
}

/// Each of `n` lines' successor on one random cycle through all of them (Sattolo's
/// shuffle; xorshift64* with a fixed seed, so the same walk every run).
fn cycle(n: usize) -> Vec<u64> {
    let mut order: Vec<u64> = (0..n as u64).collect();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in (1..n).rev() {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        let j = (x.wrapping_mul(0x2545_f491_4f6c_dd1d) % i as u64) as usize;
        order.swap(i, j);
    }
    let mut succ = vec![0u64; n];
    for w in order.windows(2) {
        succ[w[0] as usize] = w[1];
    }
    if let (Some(&last), Some(&first)) = (order.last(), order.first()) {
        succ[last as usize] = first;
    }
    succ
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
                key_size: info.key_size,
                value_size: info.value_size,
                bytes: *bytes,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chase_is_one_cycle_through_every_line() {
        for n in [2, 3, 64, 1000] {
            let succ = cycle(n);
            let mut seen = vec![false; n];
            let mut at = 0usize;
            for _ in 0..n {
                assert!(
                    !seen[at],
                    "line {at} of {n} visited twice before the cycle closed"
                );
                seen[at] = true;
                at = succ[at] as usize;
            }
            assert_eq!(at, 0, "{n} lines: back at the start after {n} reads");
        }
        assert!(random_read_ns(0) > 0.0, "two lines at least");
    }

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
            key_size: 16,
            value_size: 56,
            bytes: 23_068_672,
        };
        assert_eq!(m.bytes_per_entry(), 88.0);
    }
}
