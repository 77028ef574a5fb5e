#!/usr/bin/env bash
# Runs one integration test many times, optionally with both CPUs loaded, and prints the
# pass/fail counts: the way to shake a timing race out before CI does.
#
#   scripts/soak.sh [--load] TARGET TEST RUNS
#
#   TARGET  the integration test target (a file of tests/, without .rs): routes
#   TEST    the test's exact name: rt_multipath_default_spreads_flows_over_both_routers
#   RUNS    how many runs
#   --load  keep every CPU busy (stress-ng --cpu 0) while the runs go on
#
# The test binary is built once; each run's output is kept in target/soak/ (the failed
# runs' names are printed at the end). Exits non-zero when any run failed.
set -euo pipefail
cd "$(dirname "$0")/.."

load=0
if [ "${1:-}" = "--load" ]; then
    load=1
    shift
fi
if [ $# -ne 3 ]; then
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
target=$1 test=$2 runs=$3

bash scripts/setup.sh >/dev/null
# The test binary's path, from cargo's JSON messages (no jq on a fresh machine: python3 is).
bin=$(cargo test --locked --test "$target" --no-run --message-format=json 2>/dev/null |
    python3 -c '
import json, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["kind"] == ["test"]:
        print(m["executable"])
')
if [ -z "$bin" ] || [ ! -x "$bin" ]; then
    echo "soak.sh: could not build the test target '$target' (cargo test --test $target --no-run)" >&2
    exit 2
fi
# The integration tests find the binary they drive here, as cargo test would tell them.
export CARGO_BIN_EXE_sluice="$PWD/target/debug/sluice"
cargo build --locked -p appliance --bin sluice >/dev/null 2>&1 || true

out=target/soak/$target-$test-$(date +%Y%m%d-%H%M%S)
mkdir -p "$out"
stress=""
if [ "$load" = 1 ]; then
    command -v stress-ng >/dev/null || { echo "soak.sh: stress-ng is missing (scripts/setup.sh installs it)" >&2; exit 2; }
    stress-ng --cpu 0 --cpu-load 100 --quiet &
    stress=$!
    trap 'kill $stress 2>/dev/null || true; wait $stress 2>/dev/null || true' EXIT
fi

pass=0 fail=0 failed=()
for i in $(seq 1 "$runs"); do
    start=$SECONDS
    if "$bin" --exact "$test" --nocapture >"$out/run-$i.log" 2>&1 \
        && grep -q "test result: ok. 1 passed" "$out/run-$i.log"; then
        pass=$((pass + 1))
        verdict=pass
    else
        fail=$((fail + 1))
        failed+=("$out/run-$i.log")
        verdict=FAIL
    fi
    echo "soak.sh: run $i/$runs $verdict in $((SECONDS - start)) s (pass $pass, fail $fail)"
done
echo "soak.sh: $target::$test: $pass passed, $fail failed of $runs$([ "$load" = 1 ] && echo ' (CPUs loaded)')"
for f in "${failed[@]}"; do
    echo "  failed: $f"
done
[ "$fail" = 0 ]
