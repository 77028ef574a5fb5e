#!/usr/bin/env bash
# Sets everything up, then runs every test of the workspace (unit, golden packets, property
# tests and the network-namespace integration tests, which need root).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Every test binary runs even after a failure (--no-fail-fast), so one run shows all of them.
# Tests inside one binary run in parallel; each names its own namespaces uniquely.
cargo test --workspace --all-targets --locked --no-fail-fast "$@"
