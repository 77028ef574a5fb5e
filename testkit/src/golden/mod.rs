//! Golden packets: rows of `{ description, given, input, verdict, output, counter }` for
//! `lb::process`, after katran's fixtures.
//!
//! Every row reads and runs alone: [`run_alone`] starts from the one shared setup
//! ([`setup`]: the VIPs of `golden.toml`, next hops resolved) with an empty connection
//! table, runs the row's `given` frames (the forward packet a return packet belongs to),
//! then its input, at the fixed [`NOW`]. Expected frames are built field by field with
//! [`build`], whose checksums are computed from scratch, never derived from the code under
//! test. The rows are grouped by what they show, one file each; [`fixtures`] lists them
//! all, in a fixed order, for the tests, the benches and the XDP flow-cache parity test.

mod acl;
pub mod build;
mod clientaddr;
mod dr;
mod fragment;
mod fragnat;
mod fullnat;
mod icmp;
mod kernel;
mod malformed;
mod nat;
mod outbound;
pub mod setup;
mod stateless;
mod synproxy;
mod teardown;
mod tenant;
mod tunnel;
mod unserved;

use lb::FlowState;
use lb::conntrack::{ConnStats, ConnTable};
use lb::process::{DropReason, Verdict, WorkerStats, process};
use lb::{Frame, HEADROOM, Tables, WorkerState};

pub use build::{PEER_ISN, Pkt, checksum, icmp, l4_checksum, tcp, udp};
pub use setup::{CONFIG_TOML, config, fresh_conntrack, setup, tables, tables_for};

/// The fixed clock of every fixture.
pub const NOW: u64 = 1_000_000_000_000;
/// Interface the client side (uplink) is on.
pub const UPLINK: u32 = 1;
/// Interface the backends are on (two-arm).
pub const BACKENDS: u32 = 2;
/// The router's MAC on the uplink.
pub const ROUTER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x01];
/// The appliance's MAC.
pub const OUR_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0xaa];

/// A frame a row needs processed before its own input (on the same connection table).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Given {
    /// The frame as received.
    pub frame: Vec<u8>,
    /// Interface it arrives on.
    pub ifindex: u32,
}

impl Given {
    /// A frame from the client side.
    pub fn from_client(p: &Pkt) -> Given {
        Given {
            frame: p.build(),
            ifindex: UPLINK,
        }
    }
}

/// The worker statistic a row must grow by exactly one (besides its verdict's counters).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Counter {
    /// `time_exceeded_sent`: an ICMP time exceeded answered for TTL 1 (it also counts the
    /// TTL drop).
    TimeExceededSent,
    /// `stateless_return`: a backend's reply without a flow, rewritten from the tables.
    StatelessReturn,
    /// `echo_replies`: an echo request to a VIP answered.
    EchoReplies,
    /// `icmp_errors_forwarded`: an ICMP error sent on to the quoted flow's backend.
    IcmpErrorsForwarded,
    /// `fragments`: a fragment forwarded.
    Fragments,
    /// `proxy_headers`: a PROXY v2 header put in front of a flow's first data.
    ProxyHeaders,
    /// `toa_options`: a TOA option added.
    ToaOptions,
    /// `too_big_sent`: an ICMP too-big answered for a tunnel frame over the egress MTU (it
    /// also counts the `too_big` drop).
    TooBigSent,
    /// The connection table's `rst_out_of_window`: an RST off its sender's sequence space,
    /// forwarded, closing nothing.
    RstOutOfWindow,
    /// The connection table's `fin_out_of_window`: the same for a FIN.
    FinOutOfWindow,
    /// `syn_proxy_answered`: a SYN answered with a cookie.
    SynProxyAnswered,
    /// `syn_proxy_opened`: an ACK's cookie checked, the flow opened toward a backend.
    SynProxyOpened,
    /// `syn_proxy_bad_cookies`: an ACK without a flow whose acknowledgement is no cookie.
    SynProxyBadCookies,
    /// `syn_proxy_established`: a backend's SYN-ACK turned into the handshake's last ACK.
    SynProxyEstablished,
}

impl Counter {
    /// The statistic's value in `s` and the connection table's counters `c`.
    pub fn read(self, s: &WorkerStats, c: &ConnStats) -> u64 {
        match self {
            Counter::RstOutOfWindow => c.rst_out_of_window,
            Counter::FinOutOfWindow => c.fin_out_of_window,
            Counter::TimeExceededSent => s.time_exceeded_sent,
            Counter::StatelessReturn => s.stateless_return,
            Counter::EchoReplies => s.echo_replies,
            Counter::IcmpErrorsForwarded => s.icmp_errors_forwarded,
            Counter::Fragments => s.fragments,
            Counter::ProxyHeaders => s.proxy_headers,
            Counter::ToaOptions => s.toa_options,
            Counter::TooBigSent => s.too_big_sent,
            Counter::SynProxyAnswered => s.syn_proxy_answered,
            Counter::SynProxyOpened => s.syn_proxy_opened,
            Counter::SynProxyBadCookies => s.syn_proxy_bad_cookies,
            Counter::SynProxyEstablished => s.syn_proxy_established,
        }
    }
}

/// One golden packet.
#[derive(Debug, Clone)]
pub struct Fixture {
    /// What it shows; unique, so it names the row.
    pub description: &'static str,
    /// Frames run first, in order, on the same fresh state: the state the row needs.
    pub given: Vec<Given>,
    /// Frame as received.
    pub input: Vec<u8>,
    /// Interface it arrives on.
    pub ifindex: u32,
    /// Expected verdict.
    pub verdict: Verdict,
    /// Expected frame for `Tx` (for `Pass` and `Drop` the input, untouched).
    pub output: Vec<u8>,
    /// A worker statistic that must grow by exactly one.
    pub counter: Option<Counter>,
    /// The state every flow of the connection table is in after the row (the given frames'
    /// flows and the input's): what a FIN or RST did to them.
    pub state_after: Option<FlowState>,
}

impl Fixture {
    /// A frame from the client side sent out on `egress` as `output`.
    pub fn tx(description: &'static str, input: Vec<u8>, egress: u32, output: Vec<u8>) -> Self {
        Fixture {
            description,
            given: Vec::new(),
            input,
            ifindex: UPLINK,
            verdict: Verdict::Tx { ifindex: egress },
            output,
            counter: None,
            state_after: None,
        }
    }

    /// A frame from the client side left to the kernel, untouched.
    pub fn pass(description: &'static str, input: Vec<u8>) -> Self {
        Self::untouched(description, input, Verdict::Pass)
    }

    /// A frame from the client side dropped for `reason`, untouched.
    pub fn drop(description: &'static str, input: Vec<u8>, reason: DropReason) -> Self {
        Self::untouched(description, input, Verdict::Drop(reason))
    }

    fn untouched(description: &'static str, input: Vec<u8>, verdict: Verdict) -> Self {
        Fixture {
            description,
            given: Vec::new(),
            output: input.clone(),
            input,
            ifindex: UPLINK,
            verdict,
            counter: None,
            state_after: None,
        }
    }

    /// This row with its input arriving on `ifindex` (a backend's reply: [`BACKENDS`]).
    pub fn arriving_on(mut self, ifindex: u32) -> Self {
        self.ifindex = ifindex;
        self
    }

    /// This row after `given` (the frames that create the state it needs).
    pub fn given(mut self, given: Vec<Given>) -> Self {
        self.given = given;
        self
    }

    /// This row leaving every flow in `state`.
    pub fn leaving(mut self, state: FlowState) -> Self {
        self.state_after = Some(state);
        self
    }

    /// This row counting one `counter`.
    pub fn counting(mut self, counter: Counter) -> Self {
        self.counter = Some(counter);
        self
    }
}

/// A row of the table: built from the shared tables (for the backends' MACs).
type Row = fn(&Tables) -> Fixture;

/// Every fixture, in a fixed order (the digests in `tests/golden_digests.txt` follow it).
pub fn fixtures() -> Vec<Fixture> {
    let t = tables();
    let groups: [&[Row]; 17] = [
        nat::ROWS,
        fullnat::ROWS,
        dr::ROWS,
        tunnel::ROWS,
        icmp::ROWS,
        fragment::ROWS,
        fragnat::ROWS,
        malformed::ROWS,
        kernel::ROWS,
        unserved::ROWS,
        clientaddr::ROWS,
        stateless::ROWS,
        outbound::ROWS,
        tenant::ROWS,
        teardown::ROWS,
        acl::ROWS,
        synproxy::ROWS,
    ];
    groups
        .iter()
        .flat_map(|g| g.iter())
        .map(|row| row(&t))
        .collect()
}

/// The rows of the stateless answer (DR VIPs with four backends), in order: what the XDP
/// program must answer in flood mode.
pub fn stateless_fixtures() -> Vec<Fixture> {
    let t = tables();
    stateless::ROWS.iter().map(|row| row(&t)).collect()
}

/// The outbound rows (answers to the backends' own connections), in order: the DR ones the
/// XDP program forwards itself.
pub fn outbound_fixtures() -> Vec<Fixture> {
    let t = tables();
    outbound::ROWS.iter().map(|row| row(&t)).collect()
}

/// The fixture with this description (panics if there is none: a test names a row).
pub fn fixture(description: &str) -> Fixture {
    fixtures()
        .into_iter()
        .find(|f| f.description == description)
        .unwrap_or_else(|| panic!("no golden fixture {description:?}"))
}

/// Runs one frame through `process` at [`NOW`] in a buffer poisoned with 0xa5 around it;
/// returns the verdict and the frame as left in the buffer.
pub fn run_frame(
    input: &[u8],
    ifindex: u32,
    t: &Tables,
    ct: &mut ConnTable,
    w: &mut WorkerState,
) -> (Verdict, Vec<u8>) {
    let mut buf = vec![0xa5u8; HEADROOM + input.len() + 2048];
    buf[HEADROOM..HEADROOM + input.len()].copy_from_slice(input);
    let mut frame = Frame::new(&mut buf, HEADROOM, input.len(), ifindex).expect("frame");
    let v = process(&mut frame, t, ct, w, NOW);
    (v, frame.data().to_vec())
}

/// A fresh connection table and worker state with `fx`'s given frames run through them:
/// the state `fx`'s input expects.
pub fn state_for(fx: &Fixture, t: &Tables) -> (ConnTable, WorkerState) {
    let mut ct = fresh_conntrack(t);
    let mut w = WorkerState::new();
    for g in &fx.given {
        run_frame(&g.frame, g.ifindex, t, &mut ct, &mut w);
    }
    (ct, w)
}

/// What [`run_alone`] saw that the row did not expect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mismatch {
    /// The row.
    pub description: &'static str,
    /// What differed, with hex dumps for frames.
    pub what: String,
}

/// Runs `fx` alone (fresh state, its given frames, then its input) and checks its verdict,
/// its output bytes and its counters.
pub fn run_alone(fx: &Fixture, t: &Tables) -> Result<Vec<u8>, Mismatch> {
    let (mut ct, mut w) = state_for(fx, t);
    let drops_before = w.drops;
    let counter_before = fx.counter.map(|c| c.read(&w.stats, &ct.stats));
    let (v, out) = run_frame(&fx.input, fx.ifindex, t, &mut ct, &mut w);
    let fail = |what: String| Mismatch {
        description: fx.description,
        what,
    };
    if v != fx.verdict {
        return Err(fail(format!("verdict {v:?}, want {:?}", fx.verdict)));
    }
    if out != fx.output {
        return Err(fail(format!(
            "output differs\n got:\n{}want:\n{}",
            hex(&out),
            hex(&fx.output)
        )));
    }
    let drops: u64 = drops_before.iter().sum();
    // A time-exceeded or too-big answer counts its drop; a Tx may count nothing else.
    let want_drops = match v {
        Verdict::Drop(_) => drops + 1,
        Verdict::Tx { .. } => {
            drops
                + u64::from(matches!(
                    fx.counter,
                    Some(Counter::TimeExceededSent | Counter::TooBigSent)
                ))
        }
        Verdict::Pass => drops,
    };
    if w.total_drops() != want_drops {
        return Err(fail(format!(
            "{} drops, want {want_drops}",
            w.total_drops()
        )));
    }
    if let Verdict::Drop(r) = v
        && w.drops[r.index()] != drops_before[r.index()] + 1
    {
        return Err(fail(format!("drop counter {r:?} did not grow by one")));
    }
    if let (Some(c), Some(before)) = (fx.counter, counter_before)
        && c.read(&w.stats, &ct.stats) != before + 1
    {
        return Err(fail(format!("{c:?} did not grow by one")));
    }
    if let Some(want) = fx.state_after {
        let states: Vec<FlowState> = ct.ids().map(|id| ct.flow(id).state).collect();
        if states.is_empty() || states.iter().any(|s| *s != want) {
            return Err(fail(format!("flows in {states:?}, want all {want:?}")));
        }
    }
    Ok(out)
}

/// Rows of 16 bytes in hex, each with its offset.
pub fn hex(b: &[u8]) -> String {
    b.chunks(16)
        .enumerate()
        .map(|(i, c)| {
            let h: Vec<String> = c.iter().map(|x| format!("{x:02x}")).collect();
            format!("{:04x}: {}\n", i * 16, h.join(" "))
        })
        .collect()
}
