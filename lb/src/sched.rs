//! The LVS schedulers, for VIPs that do not use Maglev.
//!
//! Each function reproduces the overhead formula of the matching `net/netfilter/ipvs/ip_vs_*.c`
//! module so operators who know `ipvsadm` get the behaviour they expect. Inputs are a
//! [`PoolView`] (weights and eligibility from the immutable tables, active/inactive counters
//! from the worker) and a per-VIP, per-worker [`SchedState`] for cursors and locality caches.
//! Counters are per worker (LVS keeps them global): with RSS spreading flows evenly, each
//! worker sees a representative share, and no cross-core write happens on the packet path.
//!
//! Formulas (LVS names): `lc` overhead = `active * 256 + inactive`; `wlc` picks the minimum
//! of `overhead / weight`, compared as `loh * dw > doh * lw` so no division happens; `sed`
//! uses `(active + 1) / weight` the same way (the task's `(active + 1) * 256 / weight` scales
//! both sides equally and compares identically); `nq` takes the first idle server
//! (`active == 0`) and otherwise behaves as `sed`. `wrr` is LVS's interleaved
//! max-weight/gcd walk. `sh` / `dh` index a 256-bucket table built by the control plane from
//! the eligible backends (`lvs_bucket_table`), hashed on the source / destination address
//! only (and the port with the VIP's `sh-port` / `dh-port` flag, as in LVS). `lblc` / `lblcr`
//! keep a per-destination-address locality cache with LVS's overload rule: a cached server is
//! overloaded when `active > weight` *and* some server has `active * 2 < weight`; then the
//! least-loaded (`wlc`) server is chosen instead.

use crate::hash::{FlowKey, mix64};
use config::Scheduler;

/// Size of the `sh` and `dh` bucket tables (`IP_VS_SH_TAB_SIZE`, `IP_VS_DH_TAB_SIZE`).
pub const BUCKETS: usize = 256;
/// Direct-mapped locality cache entries per `lblc`/`lblcr` VIP (LVS: `IP_VS_LBLC_TAB_SIZE`).
pub const LOCALITY_ENTRIES: usize = 1024;
/// Servers per `lblcr` set; a full set replaces its most loaded member.
pub const LBLCR_SET_MAX: usize = 8;
/// LVS's default `lblc_expiration` / `lblcr_expiration`: 24 hours, in nanoseconds.
pub const LOCALITY_EXPIRATION_NS: u64 = 24 * 3600 * 1_000_000_000;

/// What a scheduler sees of a VIP's pool; all slices are indexed by the backend's position
/// within the VIP and have equal length.
#[derive(Debug, Clone, Copy)]
pub struct PoolView<'a> {
    /// Configured weight.
    pub weight: &'a [u32],
    /// May take new flows: healthy, `active` state and weight > 0.
    pub eligible: &'a [bool],
    /// Established connections (this worker).
    pub active: &'a [u32],
    /// Other connections: handshaking, closing, UDP (this worker).
    pub inactive: &'a [u32],
}

impl PoolView<'_> {
    fn len(&self) -> usize {
        self.weight.len()
    }

    /// `ip_vs_dest_conn_overhead`: `active * 256 + inactive`.
    pub fn overhead(&self, i: usize) -> u64 {
        (u64::from(self.active[i]) << 8) + u64::from(self.inactive[i])
    }

    /// LVS `is_overloaded` (lblc, lblcr).
    pub fn is_overloaded(&self, i: usize) -> bool {
        if self.active[i] <= self.weight[i] {
            return false;
        }
        (0..self.len()).any(|d| u64::from(self.active[d]) * 2 < u64::from(self.weight[d]))
    }
}

#[derive(Debug, Clone, Copy, Default)]
struct LocalityEntry {
    dst: u128,
    used: bool,
    last_use: u64,
    /// lblc: the one server; lblcr: the set's members.
    set: [u16; LBLCR_SET_MAX],
    len: u8,
    last_mod: u64,
}

/// Per-VIP, per-worker scheduler state: round-robin cursors and locality caches. Allocated
/// once when a worker adopts a table version.
#[derive(Debug, Clone)]
pub struct SchedState {
    rr_next: usize,
    wrr_i: isize,
    wrr_cw: i64,
    locality: Vec<LocalityEntry>,
    /// Idle time after which `lblc`/`lblcr` entries expire and after which an `lblcr` set
    /// sheds its most loaded member.
    pub expiration_ns: u64,
}

impl SchedState {
    /// Fresh state; locality caches only for the schedulers that use them.
    pub fn new(scheduler: Scheduler) -> SchedState {
        let locality = match scheduler {
            Scheduler::Lblc | Scheduler::Lblcr => vec![LocalityEntry::default(); LOCALITY_ENTRIES],
            _ => Vec::new(),
        };
        SchedState {
            rr_next: 0,
            wrr_i: -1,
            wrr_cw: 0,
            locality,
            expiration_ns: LOCALITY_EXPIRATION_NS,
        }
    }
}

/// Builds the `sh`/`dh` bucket table as `ip_vs_sh_reassign` does: buckets are dealt to the
/// eligible servers in order, each taking `weight` consecutive buckets before the next
/// (`dh` deals one bucket each, ignoring weight, like `ip_vs_dh_reassign`). Entries are
/// positions within the pool; empty when nothing is eligible.
pub fn lvs_bucket_table(weight: &[u32], eligible: &[bool], weighted: bool) -> Vec<u16> {
    let members: Vec<usize> = (0..weight.len()).filter(|&i| eligible[i]).collect();
    if members.is_empty() {
        return Vec::new();
    }
    let mut table = Vec::with_capacity(BUCKETS);
    let mut m = 0usize;
    let mut count = 0u32;
    for _ in 0..BUCKETS {
        let d = members[m];
        table.push(d as u16);
        count += 1;
        if !weighted || count >= weight[d] {
            m = (m + 1) % members.len();
            count = 0;
        }
    }
    table
}

/// Folds an address as LVS does: IPv4 as is, IPv6 as the XOR of its four words (host order).
fn addr_fold(addr: u128, v6: bool) -> u32 {
    if v6 {
        (addr as u32) ^ ((addr >> 32) as u32) ^ ((addr >> 64) as u32) ^ ((addr >> 96) as u32)
    } else {
        addr as u32
    }
}

/// `ip_vs_sh_hashkey`: `hash_32(port + fold(addr), 8)` over the client's address, with
/// `hash_32(v, bits) = (v * 0x61C88647) >> (32 - bits)`; the client's port is added only
/// with `ports` (the `sh-port` flag), so by default every connection of a client lands in
/// one bucket.
pub fn sh_bucket(key: &FlowKey, ports: bool) -> usize {
    let port = if ports { u32::from(key.sport) } else { 0 };
    let v = port.wrapping_add(addr_fold(key.src, key.v6));
    (v.wrapping_mul(0x61C8_8647) >> (32 - 8)) as usize
}

/// `ip_vs_dh_hashkey`: `(fold(addr) * 2654435761) & 255` over the destination address, with
/// the destination port added to the folded address only with `ports` (the `dh-port` flag).
pub fn dh_bucket(key: &FlowKey, ports: bool) -> usize {
    let port = if ports { u32::from(key.dport) } else { 0 };
    let v = port.wrapping_add(addr_fold(key.dst, key.v6));
    (v.wrapping_mul(2_654_435_761) & (BUCKETS as u32 - 1)) as usize
}

/// Round robin over eligible servers (`ip_vs_rr`).
pub fn rr(pool: &PoolView<'_>, st: &mut SchedState) -> Option<usize> {
    let n = pool.len();
    for step in 0..n {
        let i = (st.rr_next + step) % n;
        if pool.eligible[i] {
            st.rr_next = (i + 1) % n;
            return Some(i);
        }
    }
    None
}

fn gcd(a: u32, b: u32) -> u32 {
    if b == 0 { a } else { gcd(b, a % b) }
}

/// Weighted round robin (`ip_vs_wrr`): walk the list; each time it wraps, lower the current
/// weight by the gcd of weights (back to the max weight at or below zero); take the first
/// server whose weight reaches the current weight.
pub fn wrr(pool: &PoolView<'_>, st: &mut SchedState) -> Option<usize> {
    let n = pool.len();
    let mut mw = 0u32;
    let mut di = 0u32;
    for i in 0..n {
        if pool.eligible[i] {
            mw = mw.max(pool.weight[i]);
            di = gcd(di, pool.weight[i]);
        }
    }
    if mw == 0 {
        return None;
    }
    // Bounded: after at most mw/di wraps a server must qualify.
    let limit = n * (mw / di.max(1) + 2) as usize;
    for _ in 0..limit {
        st.wrr_i = (st.wrr_i + 1) % n as isize;
        if st.wrr_i == 0 {
            st.wrr_cw -= i64::from(di);
            if st.wrr_cw <= 0 {
                st.wrr_cw = i64::from(mw);
            }
        }
        let i = st.wrr_i as usize;
        if pool.eligible[i] && i64::from(pool.weight[i]) >= st.wrr_cw {
            return Some(i);
        }
    }
    None
}

/// Least connection (`ip_vs_lc`): minimum `active * 256 + inactive`, first wins ties.
pub fn lc(pool: &PoolView<'_>) -> Option<usize> {
    let mut best: Option<(usize, u64)> = None;
    for i in 0..pool.len() {
        if !pool.eligible[i] {
            continue;
        }
        let oh = pool.overhead(i);
        if best.is_none_or(|(_, b)| oh < b) {
            best = Some((i, oh));
        }
    }
    best.map(|(i, _)| i)
}

/// Picks the minimum of `cost(i) / weight(i)` by cross-multiplication, first wins ties.
fn weighted_min(
    pool: &PoolView<'_>,
    allowed: impl Fn(usize) -> bool,
    cost: impl Fn(usize) -> u64,
) -> Option<usize> {
    let mut best: Option<(usize, u64)> = None;
    for i in 0..pool.len() {
        if !allowed(i) {
            continue;
        }
        let doh = cost(i);
        match best {
            None => best = Some((i, doh)),
            Some((l, loh)) => {
                let lhs = u128::from(loh) * u128::from(pool.weight[i]);
                let rhs = u128::from(doh) * u128::from(pool.weight[l]);
                if lhs > rhs {
                    best = Some((i, doh));
                }
            }
        }
    }
    best.map(|(i, _)| i)
}

/// `wlc` among the eligible backends `allowed` lets through (backends at their connection
/// limit are left out this way, as LVS's schedulers skip `IP_VS_DEST_F_OVERLOAD`).
pub fn wlc_among(pool: &PoolView<'_>, allowed: impl Fn(usize) -> bool) -> Option<usize> {
    weighted_min(
        pool,
        |i| pool.eligible[i] && allowed(i),
        |i| pool.overhead(i),
    )
}

/// Weighted least connection (`ip_vs_wlc`).
pub fn wlc(pool: &PoolView<'_>) -> Option<usize> {
    weighted_min(pool, |i| pool.eligible[i], |i| pool.overhead(i))
}

/// Shortest expected delay (`ip_vs_sed`): minimum `(active + 1) / weight`.
pub fn sed(pool: &PoolView<'_>) -> Option<usize> {
    weighted_min(
        pool,
        |i| pool.eligible[i],
        |i| u64::from(pool.active[i]) + 1,
    )
}

/// Never queue (`ip_vs_nq`): the first idle server, otherwise `sed`.
pub fn nq(pool: &PoolView<'_>) -> Option<usize> {
    (0..pool.len())
        .find(|&i| pool.eligible[i] && pool.active[i] == 0)
        .or_else(|| sed(pool))
}

fn locality_index(dst: u128) -> usize {
    (mix64((dst as u64) ^ ((dst >> 64) as u64).rotate_left(17)) as usize) % LOCALITY_ENTRIES
}

/// Locality-based least connection (`ip_vs_lblc`).
pub fn lblc(pool: &PoolView<'_>, st: &mut SchedState, dst: u128, now: u64) -> Option<usize> {
    if st.locality.is_empty() {
        return wlc(pool);
    }
    let exp = st.expiration_ns;
    let e = &mut st.locality[locality_index(dst)];
    if e.used && e.dst == dst && now.saturating_sub(e.last_use) <= exp && e.len == 1 {
        let d = e.set[0] as usize;
        e.last_use = now;
        if d < pool.len() && pool.eligible[d] && !pool.is_overloaded(d) {
            return Some(d);
        }
    }
    let d = wlc(pool)?;
    *e = LocalityEntry {
        dst,
        used: true,
        last_use: now,
        set: [d as u16; LBLCR_SET_MAX],
        len: 1,
        last_mod: now,
    };
    Some(d)
}

/// Locality-based least connection with replication (`ip_vs_lblcr`).
pub fn lblcr(pool: &PoolView<'_>, st: &mut SchedState, dst: u128, now: u64) -> Option<usize> {
    if st.locality.is_empty() {
        return wlc(pool);
    }
    let exp = st.expiration_ns;
    let e = &mut st.locality[locality_index(dst)];
    let live = e.used && e.dst == dst && now.saturating_sub(e.last_use) <= exp;
    if !live {
        let d = wlc(pool)?;
        *e = LocalityEntry {
            dst,
            used: true,
            last_use: now,
            set: [0; LBLCR_SET_MAX],
            len: 1,
            last_mod: now,
        };
        e.set[0] = d as u16;
        return Some(d);
    }
    e.last_use = now;
    // Members that left the pool (a smaller table version) are dropped first.
    let mut k = 0;
    while k < e.len as usize {
        if e.set[k] as usize >= pool.len() {
            e.set[k] = e.set[e.len as usize - 1];
            e.len -= 1;
        } else {
            k += 1;
        }
    }
    let min = dest_set_min(pool, &e.set[..e.len as usize]);
    // More than one member and the set unchanged for `expiration`: shed the most loaded.
    if e.len > 1 && now.saturating_sub(e.last_mod) > exp {
        shed_most_loaded(pool, e, now);
    }
    if let Some(d) = min
        && e.set[..e.len as usize].contains(&(d as u16))
        && !pool.is_overloaded(d)
    {
        return Some(d);
    }
    let d = wlc(pool)?;
    if !e.set[..e.len as usize].contains(&(d as u16)) {
        add_member(pool, e, d, now);
    }
    Some(d)
}

/// `ip_vs_dest_set_min`: the least loaded usable member of a replication set.
fn dest_set_min(pool: &PoolView<'_>, members: &[u16]) -> Option<usize> {
    let mut best: Option<(usize, u64)> = None;
    for &m in members {
        let i = m as usize;
        if !pool.eligible[i] {
            continue;
        }
        let doh = pool.overhead(i);
        match best {
            None => best = Some((i, doh)),
            Some((l, loh)) => {
                if u128::from(loh) * u128::from(pool.weight[i])
                    > u128::from(doh) * u128::from(pool.weight[l])
                {
                    best = Some((i, doh));
                }
            }
        }
    }
    best.map(|(i, _)| i)
}

/// `ip_vs_dest_set_max` and its removal: drops the most loaded member of a set of two or more.
fn shed_most_loaded(pool: &PoolView<'_>, e: &mut LocalityEntry, now: u64) {
    let mut most = 0usize;
    for k in 1..e.len as usize {
        let (a, b) = (e.set[most] as usize, e.set[k] as usize);
        // Weight 0 counts as infinitely loaded.
        let lhs = u128::from(pool.overhead(a)) * u128::from(pool.weight[b]);
        let rhs = u128::from(pool.overhead(b)) * u128::from(pool.weight[a]);
        if pool.weight[b] == 0 || (pool.weight[a] != 0 && lhs < rhs) {
            most = k;
        }
    }
    e.set[most] = e.set[e.len as usize - 1];
    e.len -= 1;
    e.last_mod = now;
}

/// Adds backend `d` to the set; a full set gives up its member with the highest overhead.
fn add_member(pool: &PoolView<'_>, e: &mut LocalityEntry, d: usize, now: u64) {
    if (e.len as usize) < LBLCR_SET_MAX {
        e.set[e.len as usize] = d as u16;
        e.len += 1;
    } else {
        let mut most = 0usize;
        for k in 1..LBLCR_SET_MAX {
            if pool.overhead(e.set[k] as usize) > pool.overhead(e.set[most] as usize) {
                most = k;
            }
        }
        e.set[most] = d as u16;
    }
    e.last_mod = now;
}

/// What `sh` / `dh` hash, in the operator's words (for `sluice trace`); `None` for the
/// other schedulers.
pub fn hashed_fields(scheduler: Scheduler, ports: bool) -> Option<&'static str> {
    match (scheduler, ports) {
        (Scheduler::Sh, false) => Some("client address"),
        (Scheduler::Sh, true) => Some("client address + client port (sh-port)"),
        (Scheduler::Dh, false) => Some("destination address"),
        (Scheduler::Dh, true) => Some("destination address + destination port (dh-port)"),
        _ => None,
    }
}

/// The `sh` / `dh` bucket of a flow (`None` for the other schedulers).
pub fn bucket_of(scheduler: Scheduler, key: &FlowKey, ports: bool) -> Option<usize> {
    match scheduler {
        Scheduler::Sh => Some(sh_bucket(key, ports)),
        Scheduler::Dh => Some(dh_bucket(key, ports)),
        _ => None,
    }
}

/// Runs `scheduler` (not Maglev) for a new flow. `buckets` is the VIP's `sh`/`dh` table;
/// `ports` adds the port to what `sh`/`dh` hash (the VIP's `sh-port` / `dh-port` flag).
pub fn pick(
    scheduler: Scheduler,
    ports: bool,
    pool: &PoolView<'_>,
    buckets: &[u16],
    st: &mut SchedState,
    key: &FlowKey,
    now: u64,
) -> Option<usize> {
    match scheduler {
        Scheduler::Maglev => None,
        Scheduler::Rr => rr(pool, st),
        Scheduler::Wrr => wrr(pool, st),
        Scheduler::Lc => lc(pool),
        Scheduler::Wlc => wlc(pool),
        Scheduler::Sed => sed(pool),
        Scheduler::Nq => nq(pool),
        Scheduler::Sh | Scheduler::Dh => {
            if buckets.is_empty() {
                return None;
            }
            let b = if scheduler == Scheduler::Sh {
                sh_bucket(key, ports)
            } else {
                dh_bucket(key, ports)
            };
            let d = buckets[b % buckets.len()] as usize;
            (d < pool.len() && pool.eligible[d]).then_some(d)
        }
        Scheduler::Lblc => lblc(pool, st, key.dst, now),
        Scheduler::Lblcr => lblcr(pool, st, key.dst, now),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hash::addr_to_u128;

    struct Pool {
        weight: Vec<u32>,
        eligible: Vec<bool>,
        active: Vec<u32>,
        inactive: Vec<u32>,
    }

    impl Pool {
        fn new(weight: &[u32]) -> Pool {
            Pool {
                weight: weight.to_vec(),
                eligible: weight.iter().map(|&w| w > 0).collect(),
                active: vec![0; weight.len()],
                inactive: vec![0; weight.len()],
            }
        }
        fn view(&self) -> PoolView<'_> {
            PoolView {
                weight: &self.weight,
                eligible: &self.eligible,
                active: &self.active,
                inactive: &self.inactive,
            }
        }
    }

    #[test]
    fn rr_cycles_and_skips_ineligible() {
        let mut p = Pool::new(&[1, 1, 1]);
        p.eligible[1] = false;
        let mut st = SchedState::new(Scheduler::Rr);
        let seq: Vec<usize> = (0..4).map(|_| rr(&p.view(), &mut st).unwrap()).collect();
        assert_eq!(seq, [0, 2, 0, 2]);
        p.eligible = vec![false; 3];
        assert_eq!(rr(&p.view(), &mut st), None);
    }

    #[test]
    fn wrr_interleaves_like_lvs() {
        // The ip_vs_wrr.c example: weights a=4, b=3, c=2 give a a b a b c a b c.
        let p = Pool::new(&[4, 3, 2]);
        let mut st = SchedState::new(Scheduler::Wrr);
        let seq: Vec<usize> = (0..18).map(|_| wrr(&p.view(), &mut st).unwrap()).collect();
        let one = [0, 0, 1, 0, 1, 2, 0, 1, 2];
        assert_eq!(&seq[..9], &one);
        assert_eq!(&seq[9..], &one);
        // gcd matters: weights 4 and 2 step by 2, giving a a b.
        let p = Pool::new(&[4, 2]);
        let mut st = SchedState::new(Scheduler::Wrr);
        let seq: Vec<usize> = (0..6).map(|_| wrr(&p.view(), &mut st).unwrap()).collect();
        assert_eq!(seq, [0, 0, 1, 0, 0, 1]);
    }

    #[test]
    fn lc_uses_active_times_256_plus_inactive() {
        let mut p = Pool::new(&[1, 1, 1]);
        p.active = vec![2, 3, 2];
        p.inactive = vec![10, 0, 5];
        // Overheads 522, 768, 517.
        assert_eq!(p.view().overhead(0), 522);
        assert_eq!(lc(&p.view()), Some(2));
        // 300 inactive outweigh one active connection (256).
        p.inactive = vec![300, 0, 5];
        p.active = vec![0, 1, 2];
        assert_eq!(lc(&p.view()), Some(1));
    }

    #[test]
    fn wlc_cross_multiplies_overhead_by_weight() {
        // b0: (1*256+0)/1 = 256; b1: (2*256+0)/3 = 170.7 -> b1.
        let mut p = Pool::new(&[1, 3]);
        p.active = vec![1, 2];
        assert_eq!(wlc(&p.view()), Some(1));
        // b1 at 3 active: 768/3 = 256 ties with b0; the first wins ties.
        p.active = vec![1, 3];
        assert_eq!(wlc(&p.view()), Some(0));
        // weight 0 never chosen.
        let mut p = Pool::new(&[0, 1]);
        p.active = vec![0, 100];
        assert_eq!(wlc(&p.view()), Some(1));
    }

    #[test]
    fn sed_is_active_plus_one_over_weight() {
        // b0: (0+1)/1 = 1; b1: (2+1)/5 = 0.6 -> b1 even though b0 is idle.
        let mut p = Pool::new(&[1, 5]);
        p.active = vec![0, 2];
        p.inactive = vec![0, 50];
        assert_eq!(sed(&p.view()), Some(1));
        // b1: (5+1)/5 = 1.2 > 1 -> b0.
        p.active = vec![0, 5];
        assert_eq!(sed(&p.view()), Some(0));
    }

    #[test]
    fn nq_prefers_idle_then_sed() {
        let mut p = Pool::new(&[1, 5]);
        p.active = vec![0, 2];
        assert_eq!(nq(&p.view()), Some(0));
        p.active = vec![1, 2];
        // No idle server: sed (1+1)/1 = 2 vs (2+1)/5 = 0.6.
        assert_eq!(nq(&p.view()), Some(1));
    }

    fn key(src: &str, dst: &str, sport: u16, dport: u16) -> FlowKey {
        let s: std::net::IpAddr = src.parse().unwrap();
        let d: std::net::IpAddr = dst.parse().unwrap();
        FlowKey {
            src: addr_to_u128(s),
            dst: addr_to_u128(d),
            sport,
            dport,
            proto: 6,
            v6: s.is_ipv6(),
            zone: 0,
        }
    }

    #[test]
    fn sh_dh_hash_formulas() {
        let k = key("198.51.100.7", "192.0.2.10", 40000, 80);
        let src = 0xc633_6407u32; // 198.51.100.7
        assert_eq!(
            sh_bucket(&k, false),
            (src.wrapping_mul(0x61C8_8647) >> 24) as usize
        );
        assert_eq!(
            sh_bucket(&k, true),
            ((src + 40000).wrapping_mul(0x61C8_8647) >> 24) as usize
        );
        let dst = 0xc000_020au32;
        assert_eq!(
            dh_bucket(&k, false),
            (dst.wrapping_mul(2_654_435_761) & 255) as usize
        );
        // IPv6 folds the four words.
        let k6 = key("2001:db8::7", "2001:db8::10", 1, 2);
        assert_eq!(
            sh_bucket(&k6, false),
            ((0x2001_0db8u32 ^ 7).wrapping_mul(0x61C8_8647) >> 24) as usize
        );
    }

    #[test]
    fn bucket_table_deals_by_weight() {
        let t = lvs_bucket_table(&[2, 1, 3], &[true, true, true], true);
        assert_eq!(t.len(), BUCKETS);
        assert_eq!(&t[..12], &[0, 0, 1, 2, 2, 2, 0, 0, 1, 2, 2, 2]);
        let t = lvs_bucket_table(&[2, 1, 3], &[true, false, true], false);
        assert_eq!(&t[..4], &[0, 2, 0, 2]);
        assert!(lvs_bucket_table(&[1], &[false], true).is_empty());
    }

    #[test]
    fn sh_is_sticky_per_source() {
        let p = Pool::new(&[1, 1, 1, 1]);
        let t = lvs_bucket_table(&p.weight, &p.eligible, true);
        let mut st = SchedState::new(Scheduler::Sh);
        let k1 = key("198.51.100.7", "192.0.2.10", 1000, 80);
        let k2 = key("198.51.100.7", "192.0.2.10", 2000, 80);
        let a = pick(Scheduler::Sh, false, &p.view(), &t, &mut st, &k1, 0);
        let b = pick(Scheduler::Sh, false, &p.view(), &t, &mut st, &k2, 0);
        assert_eq!(a, b);
        assert_eq!(a, Some(t[sh_bucket(&k1, false)] as usize));
    }

    /// Backends chosen for `keys` by `scheduler` over four equal backends.
    fn spread(scheduler: Scheduler, ports: bool, keys: &[FlowKey]) -> [u32; 4] {
        let p = Pool::new(&[1, 1, 1, 1]);
        let t = lvs_bucket_table(&p.weight, &p.eligible, scheduler == Scheduler::Sh);
        let mut st = SchedState::new(scheduler);
        let mut n = [0u32; 4];
        for k in keys {
            let d = pick(scheduler, ports, &p.view(), &t, &mut st, k, 0).unwrap();
            n[d] += 1;
        }
        n
    }

    #[test]
    fn sh_and_dh_hash_addresses_unless_the_port_flag_says_so() {
        // 300 connections of one client (source ports 40000..40300) to one VIP.
        let one: Vec<FlowKey> = (0..300)
            .map(|i| key("198.51.100.7", "192.0.2.10", 40000 + i, 80))
            .collect();
        let shares = spread(Scheduler::Sh, false, &one);
        assert_eq!(shares.iter().filter(|&&c| c > 0).count(), 1, "{shares:?}");
        let shares = spread(Scheduler::Sh, true, &one);
        assert!(
            shares.iter().all(|&c| c >= 30),
            "sh-port spreads: {shares:?}"
        );
        // dh: one destination address, any ports, one backend; dh-port spreads by port.
        let dports: Vec<FlowKey> = (0..300)
            .map(|i| key("198.51.100.7", "192.0.2.10", 40000, 1000 + i))
            .collect();
        let shares = spread(Scheduler::Dh, false, &dports);
        assert_eq!(shares.iter().filter(|&&c| c > 0).count(), 1, "{shares:?}");
        let shares = spread(Scheduler::Dh, true, &dports);
        assert!(
            shares.iter().all(|&c| c >= 30),
            "dh-port spreads: {shares:?}"
        );
        // 30 clients spread under sh.
        let many: Vec<FlowKey> = (0..30)
            .map(|i| key(&format!("198.51.100.{}", 10 + i), "192.0.2.10", 40000, 80))
            .collect();
        let shares = spread(Scheduler::Sh, false, &many);
        assert!(
            shares.iter().all(|&c| c >= 3),
            "30 clients spread: {shares:?}"
        );
    }

    #[test]
    fn lblc_sticks_until_overloaded() {
        let mut p = Pool::new(&[4, 4]);
        let mut st = SchedState::new(Scheduler::Lblc);
        let dst = 42u128;
        p.active = vec![1, 0];
        // wlc picks b1 (idle); then it sticks even when b0 becomes less loaded.
        assert_eq!(lblc(&p.view(), &mut st, dst, 0), Some(1));
        p.active = vec![0, 3];
        assert_eq!(lblc(&p.view(), &mut st, dst, 1), Some(1));
        // active 5 > weight 4 but nobody has active*2 < weight: not overloaded.
        p.active = vec![2, 5];
        assert_eq!(lblc(&p.view(), &mut st, dst, 2), Some(1));
        // b0 at 1 active (1*2 < 4): b1 is overloaded -> wlc picks b0 and the cache moves.
        p.active = vec![1, 5];
        assert_eq!(lblc(&p.view(), &mut st, dst, 3), Some(0));
        p.active = vec![3, 0];
        assert_eq!(lblc(&p.view(), &mut st, dst, 4), Some(0));
        // Expired entry: scheduled afresh (wlc -> b1).
        assert_eq!(
            lblc(&p.view(), &mut st, dst, 5 + LOCALITY_EXPIRATION_NS),
            Some(1)
        );
    }

    #[test]
    fn lblcr_grows_set_on_overload_and_sheds_after_expiry() {
        let mut p = Pool::new(&[2, 2, 2]);
        let mut st = SchedState::new(Scheduler::Lblcr);
        st.expiration_ns = 1000;
        let dst = 7u128;
        assert_eq!(lblcr(&p.view(), &mut st, dst, 0), Some(0));
        // b0 overloaded (3 > 2, and b2 has 0*2 < 2): add wlc's choice b2 (b1 is busier).
        p.active = vec![3, 1, 0];
        assert_eq!(lblcr(&p.view(), &mut st, dst, 10), Some(2));
        // Set {b0, b2}: the least loaded member is used.
        p.active = vec![1, 0, 1];
        p.inactive = vec![0, 0, 5];
        assert_eq!(lblcr(&p.view(), &mut st, dst, 20), Some(0));
        // Still in use, and not yet `expiration` since the set last changed (at 10).
        assert_eq!(lblcr(&p.view(), &mut st, dst, 1000), Some(0));
        let e = st.locality[locality_index(dst)];
        assert_eq!(e.len, 2);
        // Past it: the most loaded member (b2) is shed.
        p.active = vec![1, 0, 2];
        assert_eq!(lblcr(&p.view(), &mut st, dst, 1500), Some(0));
        let e = st.locality[locality_index(dst)];
        assert_eq!(&e.set[..e.len as usize], &[0]);
    }
}
