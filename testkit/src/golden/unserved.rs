//! Rows for VIPs that cannot take a new flow: every backend drains, or the backend's next
//! hop is not resolved.

use lb::{DropReason, Tables};

use super::Fixture;
use super::build::{Pkt, SYN, TCP, tcp};

const C4: &str = "198.51.100.7";

pub(super) const ROWS: &[super::Row] = &[only_backend_drains, no_neighbour];

fn only_backend_drains(_: &Tables) -> Fixture {
    let p = Pkt::new(C4, "192.0.2.70", TCP, tcp(40000, 80, SYN, 1, b""));
    Fixture::drop(
        "vip whose only backend drains: no backend for new flows",
        p.build(),
        DropReason::NoBackend,
    )
}

fn no_neighbour(_: &Tables) -> Fixture {
    let p = Pkt::new(C4, "192.0.2.80", TCP, tcp(40000, 80, SYN, 1, b""));
    Fixture::drop(
        "backend without a resolved neighbour",
        p.build(),
        DropReason::NoNeighbor,
    )
}
