//! The backend's answers: one UDP datagram from the backend's address and port to each flow
//! of the space, sent from the sink namespace through lb before a run's flood.
//!
//! The appliance keeps a NAT UDP flow `udp_new` (and out of the flow cache) until its backend
//! has answered: a one-way flow has not earned state, so a spoofer cannot fill the cache.
//! The sink counts and drops what it receives and never answers, so without these answers
//! run A2 would measure the engine behind a cache that always misses.

use std::net::{SocketAddrV4, UdpSocket};
use std::time::Duration;

use lab::netns::{LabError, Netns};

use crate::generator::{CLIENT_NET, FlowSpace};
use crate::{BACKEND, BenchError, GEN_ADDR, LB_DOWN_ADDR, PORT};

/// Datagrams per burst (half the appliance's ring), a pause between bursts.
const BURST: u32 = 1024;

/// Routes the sink's answers to the clients through lb: a permanent neighbour for lb's
/// `eth1` (the sink's XDP program drops every frame that reaches s0, ARP replies included)
/// and routes to the client network and to gen's own address.
pub(crate) fn route_answers(sink: &Netns, lb_down_mac: &str) -> Result<(), BenchError> {
    let via = LB_DOWN_ADDR.to_string();
    sink.try_run(&[
        "ip",
        "neigh",
        "replace",
        &via,
        "lladdr",
        lb_down_mac,
        "dev",
        "s0",
        "nud",
        "permanent",
    ])?;
    let gen_net = format!("{}/32", GEN_ADDR);
    for net in [CLIENT_NET, gen_net.as_str()] {
        sink.try_run(&["ip", "route", "replace", net, "via", &via, "dev", "s0"])?;
    }
    Ok(())
}

/// Sends one datagram from the backend to every flow of `space`, in bursts of [`BURST`]
/// with a short pause so that lb's ring takes them. Returns the datagrams sent.
pub(crate) fn answer_flows(sink: &Netns, space: FlowSpace) -> Result<u32, BenchError> {
    let failed = |detail: String| LabError {
        command: format!("answer the flows from {BACKEND}:{PORT} in {}", sink.name),
        detail,
    };
    sink.in_thread(move || -> Result<u32, String> {
        let socket =
            UdpSocket::bind(SocketAddrV4::new(BACKEND, PORT)).map_err(|e| format!("bind: {e}"))?;
        let mut sent = 0u32;
        for i in 0..space.flows {
            let (addr, port) = space.flow(u64::from(i));
            socket
                .send_to(b"answer", SocketAddrV4::new(addr, port))
                .map_err(|e| format!("send to {addr}:{port}: {e}"))?;
            sent += 1;
            if sent.is_multiple_of(BURST) {
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        Ok(sent)
    })?
    .join()
    .map_err(|_| failed("the thread entering the namespace panicked".into()))?
    .map_err(|e| failed(e).into())
}
