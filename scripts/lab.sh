#!/usr/bin/env bash
# Sets everything up, builds Sluice and runs the main job: `sluice lab`, a self-contained lab
# in network namespaces (client, router, appliances, backends) with real traffic through every
# forwarding mode, then the appliance's console (`sluice console`) on lb1 until you press q.
# Without a terminal (CI, pipes) it skips the console. Needs root. Extra arguments go to
# `sluice lab` (see `sluice lab --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo build --release --locked -p appliance
console=()
if [ -t 0 ] && [ -t 1 ]; then
    console=(--console)
fi
exec ./target/release/sluice lab "${console[@]}" "$@"
