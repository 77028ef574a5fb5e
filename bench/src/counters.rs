//! The bench's counters and their parsers: whole-machine CPU time (`/proc/stat`), a
//! process's CPU time, per-CPU BPF counters, interface counters and MACs (`ip -j`), and the
//! samples a run takes of them before and after its flood.

use std::time::{Duration, Instant};

use lab::netns::Netns;

use crate::BenchError;

/// `/proc/stat` counts in USER_HZ, which is 100 on every Linux ABI Sluice runs on.
pub(crate) const NS_PER_TICK: f64 = 1e7;

/// Busy and softirq CPU time of the whole machine, from the `cpu` line of `/proc/stat`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CpuTimes {
    /// Ticks not idle and not waiting for I/O (user, nice, system, irq, softirq, steal).
    pub busy: u64,
    /// Ticks in softirq (where the kernel forwards and veth delivers).
    pub softirq: u64,
}

/// Parses the aggregate `cpu` line of `/proc/stat`.
pub fn parse_proc_stat(text: &str) -> Option<CpuTimes> {
    let line = text.lines().find(|l| l.starts_with("cpu "))?;
    let f: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .ok()?;
    // user nice system idle iowait irq softirq steal [guest guest_nice: already in user].
    if f.len() < 8 {
        return None;
    }
    Some(CpuTimes {
        busy: f[0] + f[1] + f[2] + f[5] + f[6] + f[7],
        softirq: f[6],
    })
}

/// User plus system ticks of a process, from `/proc/PID/stat` (fields 14 and 15).
pub fn parse_pid_stat(text: &str) -> Option<u64> {
    // The command name (field 2) may contain spaces and parentheses: count from the last ')'.
    let rest = &text[text.rfind(')')? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // rest starts at field 3 (state), so utime (14) is index 11 and stime (15) index 12.
    let utime: u64 = f.get(11)?.parse().ok()?;
    let stime: u64 = f.get(12)?.parse().ok()?;
    Some(utime + stime)
}

/// The sum of one per-CPU `u64` counter as `lookup_percpu` returns it (one value per
/// possible CPU); `None` if a value is not 8 bytes long (not the counter it should be).
pub fn sum_percpu(values: &[Vec<u8>]) -> Option<u64> {
    values.iter().try_fold(0u64, |sum, v| {
        let bytes: [u8; 8] = v.as_slice().try_into().ok()?;
        Some(sum.wrapping_add(u64::from_ne_bytes(bytes)))
    })
}

/// Counters read at the start and the end of one run.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Sample {
    /// Frames the sink counted (rewritten to the backend).
    pub delivered: u64,
    /// UDP frames the sink counted that were not rewritten to the backend.
    pub stray: u64,
    /// Whole-machine CPU.
    pub cpu: CpuTimes,
    /// When `cpu` was read.
    pub cpu_at: Option<Instant>,
    /// Ticks of the `sluice run` process, when one runs.
    pub lb_process: Option<u64>,
    /// Counters of lb's ingress interface (eth0).
    pub lb_ingress: LinkStats,
    /// Counters of the generator's interface (g0).
    pub generator_link: LinkStats,
}

/// The packet counters of one interface, from `ip -s -j link show`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Frames received.
    pub rx_packets: u64,
    /// Frames dropped on receive (for veth: its NAPI ring overflowed, or its XDP program
    /// redirected a frame to an AF_XDP socket whose rx ring was full).
    pub rx_dropped: u64,
    /// Frames dropped on transmit (for veth: XDP frames the peer's ring could not take).
    pub tx_dropped: u64,
}

/// The counters of the first link in `ip -s -j link show` output.
pub fn parse_link_stats(json: &str) -> Option<LinkStats> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    let st = v.as_array()?.first()?.get("stats64")?;
    Some(LinkStats {
        rx_packets: st.get("rx")?.get("packets")?.as_u64()?,
        rx_dropped: st.get("rx")?.get("dropped")?.as_u64()?,
        tx_dropped: st.get("tx")?.get("dropped")?.as_u64()?,
    })
}

/// What one run measured, before it is turned into rates.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RawRun {
    /// Counters before the generator started.
    pub start: Sample,
    /// Counters after the generator stopped and the queues drained.
    pub end: Sample,
    /// Frames the generator offered.
    pub offered: u64,
    /// Wall time of the generator.
    pub elapsed: Duration,
    /// CPU time of the generator thread.
    pub generator_cpu: Duration,
}

/// Reads the whole machine's CPU times.
pub(crate) fn cpu_times() -> Result<CpuTimes, BenchError> {
    let text = std::fs::read_to_string("/proc/stat").map_err(|e| BenchError::Counter {
        what: "/proc/stat".into(),
        detail: e.to_string(),
    })?;
    parse_proc_stat(&text).ok_or_else(|| BenchError::Counter {
        what: "/proc/stat".into(),
        detail: "no parsable aggregate cpu line".into(),
    })
}

/// Busy CPUs over one second in which the bench itself does nothing.
pub(crate) fn background_busy() -> Result<f64, BenchError> {
    let a = cpu_times()?;
    let t = Instant::now();
    std::thread::sleep(Duration::from_secs(1));
    let b = cpu_times()?;
    Ok(b.busy.saturating_sub(a.busy) as f64 * NS_PER_TICK / 1e9 / t.elapsed().as_secs_f64())
}

/// The `address` of the first link in `ip -j link show` output.
pub fn parse_ip_link_mac(json: &str) -> Option<[u8; 6]> {
    let v: serde_json::Value = serde_json::from_str(json).ok()?;
    let text = v.as_array()?.first()?.get("address")?.as_str()?;
    let bytes: Vec<u8> = text
        .split(':')
        .map(|h| u8::from_str_radix(h, 16))
        .collect::<Result<_, _>>()
        .ok()?;
    <[u8; 6]>::try_from(bytes).ok()
}

pub(crate) fn mac_of(ns: &Netns, ifname: &str) -> Result<[u8; 6], BenchError> {
    let out = ns.try_run(&["ip", "-j", "link", "show", "dev", ifname])?;
    parse_ip_link_mac(&String::from_utf8_lossy(&out.stdout)).ok_or_else(|| BenchError::Counter {
        what: format!("MAC of {ifname} in {}", ns.name),
        detail: "no address in `ip -j link` output".into(),
    })
}

pub(crate) fn link_stats(ns: &Netns, ifname: &str) -> Result<LinkStats, BenchError> {
    let out = ns.try_run(&["ip", "-s", "-j", "link", "show", "dev", ifname])?;
    parse_link_stats(&String::from_utf8_lossy(&out.stdout)).ok_or_else(|| BenchError::Counter {
        what: format!("counters of {ifname} in {}", ns.name),
        detail: "no stats64 in `ip -s -j link` output".into(),
    })
}

pub(crate) fn mac_text(m: [u8; 6]) -> String {
    m.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_busy_excludes_idle_and_iowait() {
        let text = "cpu  100 5 50 1000 7 3 11 2 40 0\ncpu0 1 2 3 4 5 6 7 8 9 10\nintr 1\n";
        let t = parse_proc_stat(text).expect("parses");
        assert_eq!(t.busy, 100 + 5 + 50 + 3 + 11 + 2);
        assert_eq!(t.softirq, 11);
        assert_eq!(
            parse_proc_stat("cpu0 1 2 3\n"),
            None,
            "per-CPU lines are not the total"
        );
        assert_eq!(parse_proc_stat("cpu  1 2 x 4 5 6 7 8\n"), None);
        assert_eq!(parse_proc_stat("cpu  1 2 3\n"), None, "too few fields");
    }

    #[test]
    fn pid_stat_survives_odd_command_names() {
        let text = "4242 (we (ird) name) S 1 4242 4242 0 -1 4194560 100 0 0 0 \
                    250 75 0 0 20 0 5 0 1000 0 0";
        assert_eq!(parse_pid_stat(text), Some(325));
        assert_eq!(parse_pid_stat("4242 (short) S 1"), None);
        assert_eq!(parse_pid_stat("no parenthesis"), None);
    }

    #[test]
    fn per_cpu_counters_are_summed() {
        let cpus = [7u64, 0, u64::from(u32::MAX) + 5]
            .map(|n| n.to_ne_bytes().to_vec())
            .to_vec();
        assert_eq!(sum_percpu(&cpus), Some(7 + u64::from(u32::MAX) + 5));
        assert_eq!(sum_percpu(&[]), Some(0), "no CPUs, nothing counted");
        assert_eq!(
            sum_percpu(&[vec![1, 0, 0, 0, 0, 0, 0, 0], vec![1, 0, 0, 0]]),
            None,
            "a 4-byte value is not the sink's u64 counter"
        );
    }

    #[test]
    fn link_stats_are_parsed() {
        let json = r#"[{"ifname":"eth0","stats64":{"rx":{"bytes":1,"packets":70,"errors":0,
            "dropped":3},"tx":{"bytes":2,"packets":9,"errors":0,"dropped":5}}}]"#;
        assert_eq!(
            parse_link_stats(json),
            Some(LinkStats {
                rx_packets: 70,
                rx_dropped: 3,
                tx_dropped: 5
            })
        );
        assert_eq!(parse_link_stats(r#"[{"ifname":"eth0"}]"#), None);
    }

    #[test]
    fn link_mac_is_parsed() {
        let json = r#"[{"ifindex":3,"ifname":"eth0","address":"02:ab:0c:00:10:ff"}]"#;
        assert_eq!(
            parse_ip_link_mac(json),
            Some([0x02, 0xab, 0x0c, 0x00, 0x10, 0xff])
        );
        assert_eq!(parse_ip_link_mac(r#"[{"address":"02:ab"}]"#), None);
        assert_eq!(parse_ip_link_mac("[]"), None);
    }
}
