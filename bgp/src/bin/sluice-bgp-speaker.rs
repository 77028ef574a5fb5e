//! A bare [`bgp::Speaker`] in its own process, driven by command-line flags: the unit under
//! test when a test must freeze (SIGSTOP) or kill the speaker while routers watch, which a
//! speaker on a thread of the test process cannot be. Not part of the appliance.
//!
//! ```text
//! sluice-bgp-speaker --asn 65001 --router-id 10.0.0.2 --peer 10.0.0.1 --peer-asn 65000
//!     [--local 10.0.0.2] [--hold 3] [--bfd 100ms:3] [--graceful-restart 30]
//!     [--announce 192.0.2.10/32]... [--announce-delay-ms 0]
//! ```
//! It announces the prefixes (after the delay, like an appliance waiting for its health
//! checks), declares its initial routes done, prints one line per change
//! of BGP or BFD state to stdout, and runs until killed. Killing it closes the sessions
//! without NOTIFICATION, which is what a crash or a graceful-restart restart looks like.

use bgp::{BfdConfig, PeerConfig, RouteAttrs, Speaker, SpeakerConfig};
use std::time::Duration;

fn usage(msg: &str) -> ! {
    eprintln!("sluice-bgp-speaker: {msg}");
    std::process::exit(2);
}

fn parse<T: std::str::FromStr>(flag: &str, v: Option<String>) -> T {
    let v = v.unwrap_or_else(|| usage(&format!("{flag} needs a value")));
    v.parse()
        .unwrap_or_else(|_| usage(&format!("{flag}: cannot parse {v:?}")))
}

fn parse_bfd(v: &str) -> BfdConfig {
    let (iv, mult) = v
        .split_once(':')
        .unwrap_or_else(|| usage("--bfd takes INTERVALms:MULTIPLIER"));
    let ms: u64 = iv
        .trim_end_matches("ms")
        .parse()
        .unwrap_or_else(|_| usage("--bfd interval is whole milliseconds"));
    BfdConfig {
        interval: Duration::from_millis(ms),
        multiplier: mult
            .parse()
            .unwrap_or_else(|_| usage("--bfd multiplier is 1 to 255")),
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let mut args = std::env::args().skip(1);
    let (mut asn, mut router_id, mut peer, mut peer_asn) = (None, None, None, None);
    let (mut local, mut hold, mut bfd, mut gr) = (None, 3u64, None, None);
    let mut announce: Vec<bgp::IpNet> = Vec::new();
    let mut delay = 0u64;
    while let Some(flag) = args.next() {
        match flag.as_str() {
            "--asn" => asn = Some(parse::<u32>(&flag, args.next())),
            "--router-id" => router_id = Some(parse(&flag, args.next())),
            "--peer" => peer = Some(parse(&flag, args.next())),
            "--peer-asn" => peer_asn = Some(parse::<u32>(&flag, args.next())),
            "--local" => local = Some(parse(&flag, args.next())),
            "--hold" => hold = parse(&flag, args.next()),
            "--bfd" => bfd = Some(parse_bfd(&parse::<String>(&flag, args.next()))),
            "--graceful-restart" => gr = Some(parse::<u64>(&flag, args.next())),
            "--announce" => announce.push(parse(&flag, args.next())),
            "--announce-delay-ms" => delay = parse(&flag, args.next()),
            other => usage(&format!("unknown flag {other}")),
        }
    }
    let (Some(asn), Some(router_id), Some(peer), Some(peer_asn)) = (asn, router_id, peer, peer_asn)
    else {
        usage("--asn, --router-id, --peer and --peer-asn are required");
    };
    let mut p = PeerConfig::new(peer, peer_asn);
    p.local_address = local;
    p.hold_time = Duration::from_secs(hold);
    p.connect_retry = Duration::from_secs(1);
    p.idle_hold = Duration::from_millis(200);
    p.bfd = bfd;
    p.graceful_restart = gr.map(Duration::from_secs);
    let mut cfg = SpeakerConfig::new(asn, router_id);
    cfg.peers.push(p);
    let speaker = Speaker::start(cfg)
        .await
        .unwrap_or_else(|e| usage(&e.to_string()));
    tokio::time::sleep(Duration::from_millis(delay)).await;
    for prefix in announce {
        speaker
            .announce(prefix, RouteAttrs::default())
            .unwrap_or_else(|e| usage(&e.to_string()));
    }
    speaker
        .initial_routes_done()
        .unwrap_or_else(|e| usage(&e.to_string()));
    let mut last = String::new();
    loop {
        let st = &speaker.peers()[0];
        let line = match &st.bfd {
            Some(b) => format!("bgp {} bfd {} resets {}", st.state, b.state, b.bgp_resets),
            None => format!("bgp {}", st.state),
        };
        if line != last {
            println!("{line}");
            last = line;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
