#!/usr/bin/env bash
# Boot test of the appliance image (build it first with image/build.sh). As root:
#   image/boot-test.sh
# Boots mkosi.output/sluice.raw in qemu-system-x86_64 (TCG: KVM guests hang on these hosts;
# SLUICE_ACCEL=kvm to try it elsewhere) by direct kernel boot, with a virtio-net NIC on a tap
# in a network namespace, and hands the guest a generated sluice.toml as the kernel argument
# sluice.config=<base64> (sluice-provision.service writes it). Topology, all in namespaces this script creates:
#
#   client ns            router ns (BIRD, AS 65000)           guest (sluice, AS 65010)
#   198.51.100.2 ── 198.51.100.1 | br0 10.0.0.1 ── tap ─── eth0 10.0.0.10, VIP 192.0.2.10:80
#                                      └── veth ── backend ns 10.0.0.21:8080 (HTTP)
#
# Waits for sluice.service ready on the serial console ("Started sluice.service": the unit
# turns active only after sluice logs "sluice running"), then checks that BIRD established the
# session and installed the VIP route, and that HTTP from the client through the VIP reaches
# the backend. Prints the image size, the boot time (power-on to ready) and the console's
# screen on the serial line (`sluice console`, replayed through a terminal emulator, pyte);
# on any failure prints the console log. Removes the namespaces (and
# with them the tap), qemu, BIRD and the backend on exit.
# SLUICE_BOOT_APPEND adds kernel arguments, e.g. systemd.journald.forward_to_console=1 to
# see why sluice.service failed (its log on the serial console).
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${SLUICE_IMAGE_DIR:-$repo/mkosi.output}
boot_timeout=${SLUICE_BOOT_TIMEOUT:-240}
accel=${SLUICE_ACCEL:-tcg}

fail() {
    echo "boot-test: FAIL: $*" >&2
    exit 1
}

[ "$(id -u)" = 0 ] || fail "run as root (network namespaces, tap devices)"
/usr/bin/python3 -c "import pyte" 2>/dev/null ||
    fail "python3-pyte is missing (apt-get install python3-pyte; image/build.sh installs it)"
for prog in qemu-system-x86_64:qemu-system-x86 bird:bird2 birdc:bird2 curl:curl \
    python3:python3 ip:iproute2 sfdisk:fdisk base64:coreutils; do
    command -v "${prog%%:*}" >/dev/null ||
        fail "${prog%%:*} is missing (apt-get install ${prog#*:}; image/build.sh installs qemu)"
done
for f in sluice.raw sluice.vmlinuz sluice.initrd; do
    [ -f "$out/$f" ] || fail "$out/$f is missing: build the image first (image/build.sh)"
done
sluice=$repo/target/release/sluice
[ -x "$sluice" ] || fail "$sluice is missing: cargo build --release -p appliance"

id=$$
rns=slr$id      # router: bridge, tap to the guest, BIRD
bns=slb$id      # backend: HTTP server
cns=slc$id      # client: sends HTTP to the VIP
tap=sltap$id
work=$(mktemp -d /tmp/sluice-boot-test.XXXXXX)
console=$work/console.log
qemu_pid=
bird_pid=
web_pid=

plain() {
    # The serial log without terminal escapes and carriage returns, for people to read.
    sed -e 's/\x1b\[[0-9;?]*[A-Za-z]//g' -e 's/\x1b[()][A-Z0-9]//g' -e 's/\r//g' "$1"
}

cleanup() {
    local rc=$?
    set +e
    if [ "$rc" != 0 ]; then
        echo "boot-test: ---- serial console (last 150 lines) ----" >&2
        [ -f "$console" ] && plain "$console" | tail -n 150 >&2
        if [ -f "$work/bird.log" ]; then
            echo "boot-test: ---- BIRD log (last 20 lines) ----" >&2
            tail -n 20 "$work/bird.log" >&2
        fi
        echo "boot-test: ---- end (files kept in $work) ----" >&2
    fi
    for pid in $qemu_pid $bird_pid $web_pid; do
        kill "$pid" 2>/dev/null
    done
    for pid in $qemu_pid $bird_pid $web_pid; do
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null
    done
    for ns in $cns $bns $rns; do
        ip netns del "$ns" 2>/dev/null
    done
    # The whole serial console, kept next to the image for the record.
    [ -f "$console" ] && plain "$console" >"$out/boot-test-console.log"
    [ "$rc" = 0 ] && rm -rf "$work"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

nsx() {
    local ns=$1
    shift
    ip netns exec "$ns" "$@"
}

echo "boot-test: image $(du -h --apparent-size "$out/sluice.raw" | cut -f1) raw," \
    "$(du -h "$out/sluice.raw" | cut -f1) allocated$([ -f "$out/sluice.raw.zst" ] &&
        echo ", $(du -h "$out/sluice.raw.zst" | cut -f1) compressed (sluice.raw.zst)")"

# --- host side: namespaces, bridge, tap, backend, client
for ns in $rns $bns $cns; do
    ip netns add "$ns"
    nsx "$ns" ip link set lo up
done
nsx $rns ip link add br0 type bridge
nsx $rns ip addr add 10.0.0.1/24 dev br0
nsx $rns ip link set br0 up
nsx $rns ip tuntap add dev "$tap" mode tap
nsx $rns ip link set "$tap" master br0 up
nsx $rns sysctl -qw net.ipv4.ip_forward=1

ip link add "b$id" netns $rns type veth peer name eth0 netns $bns
nsx $rns ip link set "b$id" master br0 up
nsx $bns ip addr add 10.0.0.21/24 dev eth0
nsx $bns ip link set eth0 up
nsx $bns ip route add default via 10.0.0.1
# NAT: the backend's replies (from port 8080) return through the appliance, which rewrites them.
nsx $bns ip route add default via 10.0.0.10 table 100
nsx $bns ip rule add sport 8080 lookup 100

ip link add "c$id" netns $rns type veth peer name eth0 netns $cns
nsx $rns ip addr add 198.51.100.1/24 dev "c$id"
nsx $rns ip link set "c$id" up
nsx $cns ip addr add 198.51.100.2/24 dev eth0
nsx $cns ip link set eth0 up
nsx $cns ip route add default via 198.51.100.1

token="sluice-boot-test-$id-$RANDOM"
mkdir -p "$work/www"
echo "$token" >"$work/www/index.html"
ip netns exec "$bns" python3 -m http.server --bind 10.0.0.21 --directory "$work/www" 8080 \
    >"$work/backend.log" 2>&1 &
web_pid=$!

# --- BIRD in the router namespace: peers with the appliance, exports learned routes to the kernel
cat >"$work/bird.conf" <<BIRD
router id 10.0.0.1;
log "$work/bird.log" all;
protocol device { scan time 1; }
protocol kernel k4 { ipv4 { import none; export all; }; }
protocol bgp sluice {
  local 10.0.0.1 as 65000;
  neighbor 10.0.0.10 as 65010;
  hold time 9;
  connect retry time 2;
  error wait time 1, 10;
  ipv4 { import all; export none; };
}
BIRD
ip netns exec "$rns" bird -f -c "$work/bird.conf" -s "$work/bird.ctl" -P "$work/bird.pid" \
    >"$work/bird.out" 2>&1 &
bird_pid=$!

# --- the appliance config for this topology, checked here before the guest sees it
cat >"$work/sluice.toml" <<TOML
[appliance]
name = "boot-test"
interfaces = ["eth0"]
xdp_mode = "auto"
umem_frames = 4096
ring_size = 1024
conntrack_capacity = 65536

[api]
socket = "/run/sluice/api.sock"
metrics = ""

[bgp]
asn = 65010
router_id = "10.0.0.10"
graceful_shutdown_wait = "1s"

[[bgp.peer]]
address = "10.0.0.1"
asn = 65000
hold_time = "9s"
connect_retry = "1s"
source = "10.0.0.10"

[[vip]]
name = "web"
address = "192.0.2.10"
port = 80
protocol = "tcp"
mode = "nat"
scheduler = "maglev"

[[vip.backend]]
address = "10.0.0.21"
port = 8080
TOML
"$sluice" check --config "$work/sluice.toml" >/dev/null || fail "the generated sluice.toml does not pass sluice check"

# --- boot: direct kernel boot of the image's kernel and initrd, root on the disk's root
# partition (found by its GPT type, root-x86-64), the disk itself left untouched (snapshot=on)
root_uuid=$(sfdisk --json "$out/sluice.raw" | python3 -c '
import json, sys
parts = json.load(sys.stdin)["partitiontable"]["partitions"]
print(next(p["uuid"] for p in parts if p["type"].upper() == "4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709"))')
credential=$(base64 -w0 "$work/sluice.toml")
cmdline="root=PARTUUID=${root_uuid,,} rw console=tty1 console=ttyS0,115200 net.ifnames=0"
cmdline+=" loglevel=4 systemd.show_status=true"
cmdline+=" systemd.firstboot=off sluice.config=$credential ${SLUICE_BOOT_APPEND:-}"

echo "boot-test: booting under $accel (timeout ${boot_timeout}s)"
start=$(date +%s.%N)
ip netns exec "$rns" qemu-system-x86_64 -accel "$accel" -machine q35 -cpu max -smp 2 -m 1024 -nodefaults \
    -vga none -display none -monitor none -serial "file:$console" -no-reboot \
    -kernel "$out/sluice.vmlinuz" -initrd "$out/sluice.initrd" -append "$cmdline" \
    -drive "if=virtio,format=raw,file=$out/sluice.raw,snapshot=on" \
    -netdev "tap,id=n0,ifname=$tap,script=no,downscript=no" \
    -device "virtio-net-pci,netdev=n0,mac=52:54:00:51:1c:0a,guest_tso4=off,guest_tso6=off,guest_ecn=off,guest_ufo=off" \
    >"$work/qemu.out" 2>&1 &
qemu_pid=$!

ready=
while :; do
    now=$(date +%s.%N)
    if [ -f "$console" ] && grep -aqE "Started .{0,16}sluice\.service" "$console"; then
        ready=$(echo "$now - $start" | bc -l 2>/dev/null || python3 -c "print($now - $start)")
        break
    fi
    kill -0 "$qemu_pid" 2>/dev/null || { cat "$work/qemu.out" >&2; fail "qemu exited before sluice.service was ready"; }
    if [ -f "$console" ] && grep -aqE "Failed to start .{0,16}sluice\.service" "$console"; then
        fail "sluice.service failed to start (see the console log; rerun with SLUICE_BOOT_APPEND=systemd.journald.forward_to_console=1 for its own log)"
    fi
    python3 -c "import sys; sys.exit(0 if $now - $start < $boot_timeout else 1)" ||
        fail "sluice.service not ready within ${boot_timeout}s"
    sleep 0.2
done
printf 'boot-test: sluice.service ready %.1f s after power-on (%s)\n' "$ready" "$accel"

# --- BGP: session up and the VIP route in the router's kernel
deadline=$((SECONDS + 60))
until nsx $rns ip route show 192.0.2.10 | grep -q "via 10.0.0.10"; do
    [ $SECONDS -lt $deadline ] || {
        birdc -s "$work/bird.ctl" show protocols all sluice >&2 || true
        fail "no route to the VIP 192.0.2.10 from BGP within 60 s"
    }
    sleep 0.5
done
birdc -s "$work/bird.ctl" show protocols sluice | grep -q Established ||
    fail "BIRD has the route but the session is not Established"
echo "boot-test: BGP established; router: $(nsx $rns ip route show 192.0.2.10)"
birdc -s "$work/bird.ctl" show route 192.0.2.10/32 all | sed 's/^/boot-test:   /'

# --- HTTP from the client through the VIP to the backend
deadline=$((SECONDS + 30))
until reply=$(nsx $cns curl -s --max-time 3 http://192.0.2.10/) && [ "$reply" = "$token" ]; do
    [ $SECONDS -lt $deadline ] || fail "no correct HTTP reply through the VIP within 30 s (last: '${reply:-}')"
    sleep 1
done
echo "boot-test: HTTP through the VIP 192.0.2.10:80 reached the backend 10.0.0.21:8080 ('$reply')"
for _ in $(seq 20); do
    reply=$(nsx $cns curl -s --max-time 3 http://192.0.2.10/) || fail "request through the VIP failed"
    [ "$reply" = "$token" ] || fail "wrong reply through the VIP: '$reply'"
done
echo "boot-test: 20 more requests through the VIP answered correctly"

# --- the console on the serial line: replay everything qemu wrote to ttyS0 through a
# terminal emulator and print the final 80x24 screen (what an operator sees there now).
sleep 4
screen=$(/usr/bin/python3 - "$console" <<'PY'
import sys, pyte
data = open(sys.argv[1], "rb").read().decode("utf-8", "replace")
scr = pyte.Screen(80, 24)
pyte.Stream(scr).feed(data.replace("\n", "\r\n").replace("\r\r\n", "\r\n"))
print("\n".join(line.rstrip() for line in scr.display))
PY
)
echo "boot-test: ---- serial console: the console screen (80x24) ----"
printf '%s\n' "$screen"
echo "boot-test: ---- end of console screen ----"
grep -q "Overview" <<<"$screen" && grep -q "Conntrack" <<<"$screen" ||
    fail "the serial console does not show sluice console (its Overview view)"
echo "boot-test: PASS (ready ${ready%.*} s after power-on under $accel)"
