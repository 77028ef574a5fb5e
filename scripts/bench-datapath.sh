#!/usr/bin/env bash
# The datapath packet-rate benchmark: builds the release binary and runs `sluice bench`, which
# floods 64-byte UDP frames at a VIP over veth in its own network namespaces and reports the
# delivered rate and CPU per packet of Sluice (AF_XDP, copy mode on veth), Sluice with the
# XDP flow cache, a trivial XDP_REDIRECT program (the ceiling) and the kernel's forwarding
# with an nftables DNAT rule, measured side by side in the same run.
# Needs root. Extra arguments go to `sluice bench` (e.g. --seconds 10, --json; --flows for
# many flows, --cps for the connection rate with nginx backends, --idle for the idle cost).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ $EUID -ne 0 ]]; then
    echo "bench-datapath.sh: needs root (network namespaces, XDP, BPF test runs)" >&2
    exit 1
fi
for tool in ip nft ethtool; do
    if ! command -v "$tool" >/dev/null; then
        echo "bench-datapath.sh: $tool is missing: run scripts/setup.sh (packages iproute2, nftables, ethtool)" >&2
        exit 1
    fi
done
cargo build --release --locked -p appliance
exec "${CARGO_TARGET_DIR:-target}/release/sluice" bench "$@"
