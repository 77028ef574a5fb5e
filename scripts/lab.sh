#!/usr/bin/env bash
# Sets everything up, builds Sluice and runs the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
cargo build --release --locked -p appliance
exec ./target/release/sluice check --config examples/sluice.toml
