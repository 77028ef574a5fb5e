#!/usr/bin/env bash
# Sets everything up, then runs every test of the workspace (unit, golden packets, property
# tests and the network-namespace integration tests, which need root), then builds the
# appliance image once and boots it in qemu for the image's checks (image/boot-test.sh).
# Arguments go to `cargo test` (e.g. a test name); with arguments, the image is not built and
# booted, and the script says so.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Every test binary runs even after a failure (--no-fail-fast), so one run shows all of them.
# Tests inside one binary run in parallel; each names its own namespaces uniquely.
rc=0
cargo test --workspace --all-targets --locked --no-fail-fast "$@" || rc=$?
if [ $# -gt 0 ]; then
    echo "test.sh: the image's boot test was not run (arguments were given; run without them for every test)"
    exit "$rc"
fi
# The image carries the debug `sluice` the tests above just built (target/debug/sluice): a
# release build would cost minutes more for the same checks, and so would `cargo build -p
# appliance`, whose features resolve differently from the workspace's and rebuild half the
# dependencies.
echo "test.sh: building the appliance image and booting it (image/build.sh, image/boot-test.sh)"
[ -x target/debug/sluice ] || { echo "test.sh: target/debug/sluice was not built by the tests"; exit 1; }
start=$SECONDS
if SLUICE_IMAGE_PROFILE=debug SLUICE_IMAGE_NO_CARGO=1 bash image/build.sh && bash image/boot-test.sh; then
    echo "test.sh: image build and boot test passed in $((SECONDS - start)) s"
else
    echo "test.sh: image build or boot test FAILED after $((SECONDS - start)) s"
    rc=1
fi
exit "$rc"
