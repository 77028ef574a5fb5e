#!/usr/bin/env bash
# Sets everything up, then runs every test of the workspace (unit, golden packets, property
# tests and the network-namespace integration tests, which need root).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Every test binary runs even after a failure (--no-fail-fast), so one run shows all of them.
# Namespace labs from several test binaries may run at once; each test names its own
# namespaces uniquely, so parallel runs are safe.
cargo test --workspace --all-targets --locked --no-fail-fast "$@"
