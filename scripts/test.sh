#!/usr/bin/env bash
# Sets everything up, then runs every test of the workspace (unit, golden packets, property
# tests and the network-namespace integration tests, which need root), builds the appliance
# image once (beside the tests) and boots it in qemu for the image's checks
# (image/boot-test.sh).
# Arguments go to `cargo test` (e.g. a test name); with arguments, the image is not built and
# booted, and the script says so.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# Every test binary runs even after a failure (--no-fail-fast), so one run shows all of them.
# Tests inside one binary run in parallel; each names its own namespaces uniquely.
rc=0
if [ $# -gt 0 ]; then
    cargo test --workspace --all-targets --locked --no-fail-fast "$@" || rc=$?
    echo "test.sh: the image's boot test was not run (arguments were given; run without them for every test)"
    exit "$rc"
fi
# The image carries the debug `sluice` the tests build (target/debug/sluice): a release build
# would cost minutes more for the same checks, and so would `cargo build -p appliance`, whose
# features resolve differently from the workspace's and rebuild half the dependencies. So the
# tests are built first; the image is then built while they run, at the lowest CPU and I/O
# priority, mostly in what they leave idle (the namespace tests mostly wait on timers and on
# each other): its 160 s leave CI's serial path. Not free: the two vCPUs share more than the
# scheduler arbitrates, and the appliance's unit tests beside it took 67 s instead of 11 s
# (a niced clippy beside the test build once doubled the build): so the unit tests, which are
# CPU-bound, run first and alone (every library's and binary's: 27 s alone), and the image is
# built beside the integration tests and benchmarks (in test mode), which mostly wait. The
# boot test runs after the tests, alone: its guest's timers (BGP, the client's) must not wait
# on theirs. The two `cargo test` runs below together cover `--all-targets`: `--benches`
# would take the libraries again (they are bench targets too), so the benches go by name.
cargo test --workspace --all-targets --locked --no-run || exit 1
[ -x target/debug/sluice ] || { echo "test.sh: target/debug/sluice was not built by the tests"; exit 1; }
start=$SECONDS
cargo test --workspace --lib --bins --locked --no-fail-fast || rc=$?
echo "test.sh: the unit tests took $((SECONDS - start)) s"
echo "test.sh: building the appliance image beside the integration tests (image/build.sh at nice 19; its output after them)"
image_log=target/image-build.log
SLUICE_IMAGE_PROFILE=debug SLUICE_IMAGE_NO_CARGO=1 nice -n 19 ionice -c 3 bash image/build.sh \
    >"$image_log" 2>&1 &
image_pid=$!
trap 'kill "$image_pid" 2>/dev/null || true' INT TERM
cargo test --workspace --test '*' --bench '*' --examples --locked --no-fail-fast || rc=$?
tests_done=$((SECONDS - start))
image_rc=0
wait "$image_pid" || image_rc=$?
cat "$image_log"
echo "test.sh: the tests took ${tests_done} s; the image build ended $((SECONDS - start)) s after they started"
if [ "$image_rc" != 0 ]; then
    echo "test.sh: image build FAILED (exit $image_rc, output above)"
    exit 1
fi
echo "test.sh: booting the image (image/boot-test.sh)"
start=$SECONDS
if bash image/boot-test.sh; then
    echo "test.sh: boot test passed in $((SECONDS - start)) s"
else
    echo "test.sh: boot test FAILED after $((SECONDS - start)) s"
    rc=1
fi
exit "$rc"
