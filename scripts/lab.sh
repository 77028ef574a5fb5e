#!/usr/bin/env bash
# Sets everything up, builds Sluice and runs the main job: `sluice lab`, a self-contained lab
# in network namespaces (client, router, appliance, backends) with real traffic through every
# forwarding mode. Needs root. Extra arguments go to `sluice lab` (see `sluice lab --help`).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo build --release --locked -p appliance
exec ./target/release/sluice lab "$@"
