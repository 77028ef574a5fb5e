#!/usr/bin/env bash
# Boot test of the appliance image (build it first with image/build.sh). As root:
#   image/boot-test.sh
# Boots mkosi.output/sluice.raw in qemu-system-x86_64 (TCG: KVM guests fail on these hosts;
# SLUICE_ACCEL=kvm to try it elsewhere) five times, on copy-on-write overlays of the image (the
# image itself is never written), with a virtio-net NIC on a tap in a network namespace. The
# image carries no address and no config: the test hands in its own.
#
#   client ns          router ns (BIRD, AS 65100)                        guest (sluice, AS 65110)
#   198.18.22.2 ── 198.18.22.1 | br0 172.30.22.1 ── tap ── eth0 172.30.22.10
#                              | (VLAN 42, tagged frames on br0) ─ eth0.42 172.30.42.10
#                              | update mirror http://172.30.22.1:8081/
#                  172.30.23.1 ── backend ns 172.30.23.21-22:8080 (HTTP; routed, not on-link)
#
# 1. First boot, UEFI (OVMF: systemd-boot, slot A), a 5 GB disk and a seed disk labelled
#    CIDATA with sluice.toml (VIP 203.0.113.80:80) and network files (eth0's address and two
#    static routes, the VLAN 42 netdev and its address, a DNS server). Checks: the seed's
#    lines on the console, the state partition grown to the disk, sluice.service ready, BIRD's
#    session and the VIP route, HTTP through the VIP to the routed backend, the VLAN address
#    answering, and the console on the serial line. Then, from the root shell on the serial
#    line: a drain; `systemctl restart sluice` while a client requests through the VIP every
#    100 ms (no request may fail: the tables are handed over, BGP graceful restart keeps the
#    route); and `sluice image update` of this build (version bumped) from a disk into slot B
#    while the client requests again.
# 2. Slot B on trial: ready, marked good (boot counting); the outage in seconds; the config
#    and the drain survived. Then a deliberately broken build (its sluice exits 1) into slot A,
#    by URL from the mirror with its sha256, after an unsigned bundle from the mirror was
#    refused. Every bundle is signed with image/build.sh's update key.
# 3. Slot A on trial fails (sluice.service never ready): marked bad, reboots by itself.
# 4. Slot B again, with a new sluice.toml (VIP 203.0.113.81:80) as a systemd credential (qemu
#    -smbios type=11) and virtio-net with 2 queue pairs: the console says slot A failed and
#    why, the new VIP's route and HTTP, two queues and two workers on the console, `sluice ctl
#    status` saying whether zero-copy was bound (the kernel's reason when not); then, from the
#    powered-off disk, the journal on the state partition holds the four boots and sluice's
#    AF_XDP lines.
# 5. A fresh disk with nothing handed in (direct kernel boot): the console says what is
#    missing and how to give it and stays up; sluice.service is not started.
# Prints the boot-to-ready times and the console screens; on any failure prints the current
# boot's console log. Every namespace, the tap, qemu, BIRD and the backend go on exit.
# SLUICE_BOOT_APPEND adds kernel arguments to the direct boots, e.g.
# systemd.journald.forward_to_console=1 to see why sluice.service failed.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${SLUICE_IMAGE_DIR:-$repo/mkosi.output}
# Generous: a first boot under TCG takes about 3 minutes on a busy 2-core machine.
boot_timeout=${SLUICE_BOOT_TIMEOUT:-900}
accel=${SLUICE_ACCEL:-tcg}
# max: with qemu64 (about 30% faster to boot under TCG) the second vCPU's timer sometimes
# never fired (RCU stalls from the first second, the guest hung).
cpu=${SLUICE_QEMU_CPU:-max}
ovmf_code=/usr/share/OVMF/OVMF_CODE_4M.fd
ovmf_vars=/usr/share/OVMF/OVMF_VARS_4M.fd

fail() {
    echo "boot-test: FAIL: $*" >&2
    exit 1
}

[ "$(id -u)" = 0 ] || fail "run as root (network namespaces, tap devices)"
/usr/bin/python3 -c "import pyte" 2>/dev/null ||
    fail "python3-pyte is missing (apt-get install python3-pyte; image/build.sh installs it)"
for prog in qemu-system-x86_64:qemu-system-x86 qemu-img:qemu-utils bird:bird2 birdc:bird2 \
    curl:curl python3:python3 ip:iproute2 sfdisk:fdisk base64:coreutils mkfs.vfat:dosfstools \
    mcopy:mtools socat:socat debugfs:e2fsprogs journalctl:systemd; do
    command -v "${prog%%:*}" >/dev/null ||
        fail "${prog%%:*} is missing (apt-get install ${prog#*:}; image/build.sh installs it)"
done
[ -f "$ovmf_code" ] || fail "$ovmf_code is missing (apt-get install ovmf; image/build.sh installs it)"
for f in sluice.raw sluice.vmlinuz sluice.initrd; do
    [ -f "$out/$f" ] || fail "$out/$f is missing: build the image first (image/build.sh)"
done
# The binary the image carries (image/build.sh strips it into .image-tools/).
sluice=$repo/.image-tools/sluice
[ -x "$sluice" ] || fail "$sluice is missing: build the image first (image/build.sh)"

id=$$
rns=im5r$id # router: bridge, tap to the guest, BIRD
bns=im5b$id # backend: HTTP server, routed behind the router
cns=im5c$id # client: sends HTTP to the VIPs
tap=im5t$id
work=$(mktemp -d /tmp/sluice-boot-test.XXXXXX)
console=$work/none.log
qemu_pid=
bird_pid=
web_pid=
web2_pid=
mirror_pid=
traffic_pid=

plain() {
    # The serial log without terminal escapes and carriage returns, for people to read.
    sed -e 's/\x1b\[[0-9;?]*[A-Za-z]//g' -e 's/\x1b[()][A-Z0-9]//g' -e 's/\r//g' "$1"
}

# console_has REGEX: whether the current boot's console (plain text) matches REGEX. Through
# a file: `grep -q` in a pipeline would end the pipeline early, and pipefail would count that
# as a failure.
console_has() {
    [ -f "$console" ] || return 1
    plain "$console" >"$console.txt"
    grep -aqE "$1" "$console.txt"
}

# seed_lines: the seed's lines on the current boot's console.
seed_lines() {
    plain "$console" >"$console.txt"
    grep -a "sluice-seed:" "$console.txt" | sed 's/^.*sluice-seed:/boot-test:   seed:/'
}

stop() {
    local pid=$1
    [ -n "$pid" ] || return 0
    kill "$pid" 2>/dev/null || return 0
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null
    return 0
}

cleanup() {
    local rc=$?
    set +e
    if [ "$rc" != 0 ]; then
        echo "boot-test: ---- serial console of this boot, $console (last 150 lines) ----" >&2
        [ -f "$console" ] && plain "$console" | tail -n 150 >&2
        if [ -f "$work/bird.log" ]; then
            echo "boot-test: ---- BIRD log (last 20 lines) ----" >&2
            tail -n 20 "$work/bird.log" >&2
        fi
        echo "boot-test: ---- end (files kept in $work) ----" >&2
    fi
    for pid in $traffic_pid $qemu_pid $bird_pid $web_pid $web2_pid $mirror_pid; do
        stop "$pid"
    done
    for ns in $cns $bns $rns; do
        ip netns del "$ns" 2>/dev/null
    done
    # The serial consoles, kept next to the image for the record.
    for f in "$work"/boot*.log; do
        [ -f "$f" ] && plain "$f" >"$out/boot-test-${f##*/}"
    done
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

elapsed() {
    python3 -c "import sys; print('%.1f' % ($(date +%s.%N) - $1))"
}

echo "boot-test: image $(du -h --apparent-size "$out/sluice.raw" | cut -f1) raw," \
    "$(du -h "$out/sluice.raw" | cut -f1) allocated$([ -f "$out/sluice.raw.zst" ] &&
        echo ", $(du -h "$out/sluice.raw.zst" | cut -f1) compressed (sluice.raw.zst)")"

# --- host side: namespaces, bridge, tap, routed backend, client
for ns in $rns $bns $cns; do
    ip netns add "$ns"
    nsx "$ns" ip link set lo up
done
nsx $rns ip link add br0 type bridge
nsx $rns ip addr add 172.30.22.1/24 dev br0
nsx $rns ip link set br0 up
# make_tap QUEUES: the tap to the guest, made anew for each boot (a multi-queue tap serves only
# a guest with several queue pairs, a single-queue tap only one with one).
make_tap() {
    nsx $rns ip link del "$tap" 2>/dev/null || true
    if [ "$1" -gt 1 ]; then
        nsx $rns ip tuntap add dev "$tap" mode tap multi_queue
    else
        nsx $rns ip tuntap add dev "$tap" mode tap
    fi
    nsx $rns ip link set "$tap" master br0 up
}
nsx $rns sysctl -qw net.ipv4.ip_forward=1

ip link add "im5b$id" netns $rns type veth peer name eth0 netns $bns
nsx $rns ip addr add 172.30.23.1/24 dev "im5b$id"
nsx $rns ip link set "im5b$id" up
nsx $bns ip addr add 172.30.23.21/24 dev eth0
nsx $bns ip addr add 172.30.23.22/24 dev eth0
nsx $bns ip link set eth0 up
nsx $bns ip route add default via 172.30.23.1
# NAT: the backend's replies (from port 8080) must return through the appliance, which
# rewrites them; the router sends them there instead of straight to the client.
nsx $rns ip route add default via 172.30.22.10 table 100
nsx $rns ip rule add iif "im5b$id" from 172.30.23.21 ipproto tcp sport 8080 lookup 100
nsx $rns ip rule add iif "im5b$id" from 172.30.23.22 ipproto tcp sport 8080 lookup 100

ip link add "im5c$id" netns $rns type veth peer name eth0 netns $cns
nsx $rns ip addr add 198.18.22.1/24 dev "im5c$id"
nsx $rns ip link set "im5c$id" up
nsx $cns ip addr add 198.18.22.2/24 dev eth0
nsx $cns ip link set eth0 up
nsx $cns ip route add default via 198.18.22.1

token="sluice-boot-test-$id-$RANDOM"
mkdir -p "$work/www"
echo "$token" >"$work/www/index.html"
ip netns exec "$bns" python3 -m http.server --bind 172.30.23.21 --directory "$work/www" 8080 \
    >"$work/backend.log" 2>&1 &
web_pid=$!
# The second backend: the one the operator drains before the upgrade.
ip netns exec "$bns" python3 -m http.server --bind 172.30.23.22 --directory "$work/www" 8080 \
    >"$work/backend2.log" 2>&1 &
web2_pid=$!

# --- BIRD in the router namespace: peers with the appliance, exports learned routes to the kernel
cat >"$work/bird.conf" <<BIRD
router id 172.30.22.1;
log "$work/bird.log" all;
protocol device { scan time 1; }
protocol kernel k4 { ipv4 { import none; export all; }; }
protocol bgp sluice {
  local 172.30.22.1 as 65100;
  neighbor 172.30.22.10 as 65110;
  hold time 9;
  connect retry time 2;
  error wait time 1, 10;
  ipv4 { import all; export none; };
}
BIRD
ip netns exec "$rns" bird -f -c "$work/bird.conf" -s "$work/bird.ctl" -P "$work/bird.pid" \
    >"$work/bird.out" 2>&1 &
bird_pid=$!

# --- the appliance's config for this topology (one VIP per boot), checked before the guest sees it
sluice_toml() {
    cat <<TOML
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
asn = 65110
router_id = "172.30.22.10"
graceful_shutdown_wait = "1s"
graceful_restart = { enabled = true, restart_time = "120s" }

[[bgp.peer]]
address = "172.30.22.1"
asn = 65100
hold_time = "9s"
connect_retry = "1s"
source = "172.30.22.10"

[[vip]]
name = "$1"
address = "$2"
port = 80
protocol = "tcp"
mode = "nat"
scheduler = "maglev"

[[vip.backend]]
address = "172.30.23.21"
port = 8080

[[vip.backend]]
address = "172.30.23.22"
port = 8080
TOML
}
sluice_toml web-seed 203.0.113.80 >"$work/seed.toml"
sluice_toml web-cred 203.0.113.81 >"$work/cred.toml"
for f in seed cred; do
    "$sluice" check --config "$work/$f.toml" >/dev/null || fail "the generated $f.toml does not pass sluice check"
done

# --- the seed disk: vfat labelled CIDATA, written without mounting (mtools)
mkdir -p "$work/network"
cat >"$work/network/10-eth0.network" <<'NET'
[Match]
Name=eth0

[Link]
RequiredForOnline=yes

[Network]
Address=172.30.22.10/24
VLAN=eth0.42
DNS=172.30.22.1
IPv6AcceptRA=no
LinkLocalAddressing=no

[Route]
Destination=172.30.23.0/24
Gateway=172.30.22.1

[Route]
Destination=198.18.22.0/24
Gateway=172.30.22.1
NET
cat >"$work/network/20-vlan42.netdev" <<'NET'
[NetDev]
Name=eth0.42
Kind=vlan

[VLAN]
Id=42
NET
cat >"$work/network/30-vlan42.network" <<'NET'
[Match]
Name=eth0.42

[Link]
RequiredForOnline=no

[Network]
Address=172.30.42.10/24
LinkLocalAddressing=no
NET
truncate -s 4M "$work/seed.img"
mkfs.vfat -n CIDATA "$work/seed.img" >/dev/null
mmd -i "$work/seed.img" ::network
mcopy -i "$work/seed.img" "$work/seed.toml" ::sluice.toml
mcopy -i "$work/seed.img" "$work/network"/* ::network/

root_uuid=$(sfdisk --json "$out/sluice.raw" | python3 -c '
import json, sys
parts = json.load(sys.stdin)["partitiontable"]["partitions"]
print(next(p["uuid"] for p in parts if p["type"].upper() == "4F68BCE3-E8CD-4DB1-96E7-FBCAF984B709"))')
image_state=$(sfdisk --json "$out/sluice.raw" | python3 -c '
import json, sys
t = json.load(sys.stdin)["partitiontable"]
print(next(p["size"] * t.get("sectorsize", 512) for p in t["partitions"] if p.get("name") == "sluice-state"))')

# boot NAME DISK QUEUES [qemu args...]: starts the guest on DISK (a qcow2 overlay) with
# QUEUES virtio-net queue pairs, its serial console in $work/NAME.log.
boot() {
    local name=$1 disk=$2 queues=$3 mq=
    boot_args=("$@")
    shift 3
    [ "$queues" -gt 1 ] && mq=",mq=on,vectors=$((2 * queues + 2))"
    make_tap "$queues"
    console=$work/$name.log
    rm -f "$work/monitor.sock" "$work/serial.sock"
    start=$(date +%s.%N)
    ip netns exec "$rns" qemu-system-x86_64 -accel "$accel" -machine q35 -cpu "$cpu" -smp 2 -m 1024 \
        -nodefaults -vga none -display none -no-reboot \
        -chardev "socket,id=ser0,path=$work/serial.sock,server=on,wait=off,logfile=$console" \
        -serial chardev:ser0 \
        -monitor "unix:$work/monitor.sock,server,nowait" \
        -drive "if=virtio,format=qcow2,file=$disk" \
        -netdev "tap,id=n0,ifname=$tap,script=no,downscript=no,queues=$queues" \
        -device "virtio-net-pci,netdev=n0,mac=52:54:00:51:1c:0a,guest_tso4=off,guest_tso6=off,guest_ecn=off,guest_ufo=off$mq" \
        "$@" >"$work/qemu.out" 2>&1 &
    qemu_pid=$!
}

# Direct kernel boot of the image's kernel and initrd, root on the disk's root partition.
cmdline="root=PARTUUID=${root_uuid,,} rw no_timer_check console=tty1 console=ttyS0,115200 net.ifnames=0"
cmdline+=" loglevel=4 systemd.show_status=true systemd.firstboot=off"
cmdline+=" rd.systemd.mask=systemd-networkd.service rd.systemd.mask=systemd-networkd.socket"
cmdline+=" rd.systemd.mask=systemd-repart.service"
cmdline+=" ${SLUICE_BOOT_APPEND:-}"
direct=(-kernel "$out/sluice.vmlinuz" -initrd "$out/sluice.initrd" -append "$cmdline")

# The guest's timers are emulated (TCG), and about one boot in a hundred a vCPU's timer never
# fires early in boot: the guest's kernel says so ("rcu_preempt kthread timer wakeup didn't
# happen ... Possible timer handling issue on cpu=N") and hangs, PID 1 still in the kernel (seen
# with -cpu qemu64 and with max). That is the emulator, not the image: emulator_hang powers
# such a boot off and starts it again, keeping the hung console, once per run; a second one fails.
emulator_retries=1
emulator_hang() {
    local hung=$console.hung
    [ "$emulator_retries" -gt 0 ] ||
        fail "the guest's kernel again reports a vCPU timer that never fired (the emulator's fault)"
    emulator_retries=$((emulator_retries - 1))
    stop "$qemu_pid"
    mv "$console" "$hung"
    rm -f "$console.txt"
    echo "boot-test: ${boot_args[0]}: the guest's kernel reports a vCPU timer that never fired" \
        "(TCG), $(elapsed "$start") s after power-on; its console is in $hung; booting it again"
    grep -a -m1 "timer wakeup didn't happen" "$hung" | sed 's/^/boot-test:   /'
    boot "${boot_args[@]}"
}

# wait_console REGEX WHAT: until the current boot's console matches REGEX (extended, on the
# plain text), while qemu runs and sluice.service has not failed.
wait_console() {
    local re=$1 what=$2 deadline=$((SECONDS + boot_timeout))
    while :; do
        if console_has "$re"; then
            return 0
        fi
        if grep -aq "timer wakeup didn't happen" "$console.txt" 2>/dev/null; then
            emulator_hang
            deadline=$((SECONDS + boot_timeout))
            continue
        fi
        kill -0 "$qemu_pid" 2>/dev/null || { cat "$work/qemu.out" >&2; fail "qemu exited before $what"; }
        # systemd's own status line (the unit name cut short), not a line quoting it (the
        # slot status repeats the last failed trial boot's log).
        if [ -z "${sluice_may_fail:-}" ] && [ -f "$console.txt" ] &&
            grep -aqE "^\[FAILED\] Failed to start sluice\.ser" "$console.txt"; then
            fail "sluice.service failed to start (rerun with SLUICE_BOOT_APPEND=systemd.journald.forward_to_console=1 for its own log)"
        fi
        [ $SECONDS -lt $deadline ] || fail "no $what within ${boot_timeout}s"
        sleep 0.5
    done
}

# The console on the serial line: everything qemu wrote to ttyS0 replayed through a terminal
# emulator; the final 80x24 screen (what an operator sees there now).
screen() {
    /usr/bin/python3 - "$console" <<'PY'
import sys, pyte
data = open(sys.argv[1], "rb").read().decode("utf-8", "replace")
scr = pyte.Screen(80, 24)
pyte.Stream(scr).feed(data.replace("\n", "\r\n").replace("\r\r\n", "\r\n"))
print("\n".join(line.rstrip() for line in scr.display))
PY
}

# wait_screen REGEX...: until the console screen shows every REGEX (within 240 s).
wait_screen() {
    local deadline=$((SECONDS + 240)) re ok
    while :; do
        shown=$(screen)
        ok=1
        for re in "$@"; do
            grep -qE "$re" <<<"$shown" || ok=0
        done
        [ $ok = 1 ] && return 0
        [ $SECONDS -lt $deadline ] || {
            printf '%s\n' "$shown" >&2
            fail "the serial console screen does not show: $*"
        }
        sleep 2
    done
}

wait_route() {
    local vip=$1 deadline=$((SECONDS + 90))
    until grep -q "via 172.30.22.10" <<<"$(nsx $rns ip route show "$vip")"; do
        [ $SECONDS -lt $deadline ] || {
            birdc -s "$work/bird.ctl" show protocols all sluice >&2 || true
            fail "no route to the VIP $vip from BGP within 90 s"
        }
        sleep 0.5
    done
    grep -q Established <<<"$(birdc -s "$work/bird.ctl" show protocols sluice)" ||
        fail "BIRD has the route to $vip but the session is not Established"
    echo "boot-test: BGP established; router: $(nsx $rns ip route show "$vip")"
}

check_http() {
    local vip=$1 deadline=$((SECONDS + 60)) reply=
    until reply=$(nsx $cns curl -s --max-time 3 "http://$vip/") && [ "$reply" = "$token" ]; do
        [ $SECONDS -lt $deadline ] || fail "no correct HTTP reply through the VIP $vip within 60 s (last: '${reply:-}')"
        sleep 1
    done
    for _ in $(seq 20); do
        reply=$(nsx $cns curl -s --max-time 5 "http://$vip/") || fail "a request through the VIP $vip failed"
        [ "$reply" = "$token" ] || fail "wrong reply through the VIP $vip: '$reply'"
    done
    echo "boot-test: HTTP through the VIP $vip:80 reached the backend 172.30.23.21:8080, 21 requests answered"
}

# Power off through ACPI (systemd shuts down; sluice withdraws its routes); qemu exits itself
# (-no-reboot). A guest that does not go down in time is killed.
power_off() {
    echo system_powerdown | socat - "UNIX-CONNECT:$work/monitor.sock" >/dev/null 2>&1 || true
    local deadline=$((SECONDS + 120))
    while kill -0 "$qemu_pid" 2>/dev/null; do
        [ $SECONDS -lt $deadline ] || { echo "boot-test: guest did not power off in 120 s: killed"; break; }
        sleep 0.5
    done
    stop "$qemu_pid"
    qemu_pid=
}

# --- the serial line as an operator uses it: the console (q closes it), then a root shell
# type_serial TEXT: sends TEXT to the guest's ttyS0, one key at a time.
type_serial() {
    python3 - "$work/serial.sock" "$1" <<'PY'
import socket, sys, time
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[1])
for b in sys.argv[2].encode():
    s.send(bytes([b]))
    time.sleep(0.02)
time.sleep(0.2)
s.close()
PY
}

# count REGEX: lines of the current boot's console matching REGEX.
count() {
    plain "$console" >"$console.txt"
    grep -acE "$1" "$console.txt" || true
}

# wait_more REGEX N WHAT [SECONDS]: until more than N console lines match REGEX.
wait_more() {
    local deadline=$((SECONDS + ${4:-120}))
    until [ "$(count "$1")" -gt "$2" ]; do
        kill -0 "$qemu_pid" 2>/dev/null || fail "qemu exited before $3"
        [ $SECONDS -lt $deadline ] || fail "no $3 within ${4:-120}s"
        sleep 0.5
    done
}

# shell_open: closes the console on ttyS0 and takes the root shell it offers.
shell_open() {
    local n
    # The console's line, or the root-shell offer that follows it: under TCG the serial
    # line now and then repeats or drops a byte ("Console clossed." failed a CI run), so
    # either line, each matched loosely, will do.
    local closed="Console cl+o+s+e+d|Enter for a root shell"
    n=$(count "$closed")
    type_serial q
    wait_more "$closed" "$n" "the console closing on q"
    n=$(count "Press Enter for maintenance|root@sluice")
    type_serial $'\r'
    wait_more "Press Enter for maintenance|root@sluice" "$n" "sulogin's prompt"
    n=$(count "root@sluice")
    type_serial $'\r'
    wait_more "root@sluice" "$n" "the root shell"
}

# guest CMD [SECONDS]: runs CMD in the root shell on ttyS0; $rc is its exit status.
guest_n=0
guest() {
    guest_n=$((guest_n + 1))
    type_serial "$1; echo IM6 rc=\$? n=$guest_n"$'\r'
    wait_more "^IM6 rc=[0-9]+ n=$guest_n\$" 0 "the end of '$1'" "${2:-120}"
    rc=$(sed -n "s/^IM6 rc=\([0-9]*\) n=$guest_n\$/\1/p" "$console.txt" | tail -n 1)
}

# wait_exit WHAT: until qemu exits (the guest rebooted: -no-reboot ends qemu).
wait_exit() {
    local deadline=$((SECONDS + 300))
    while kill -0 "$qemu_pid" 2>/dev/null; do
        [ $SECONDS -lt $deadline ] || fail "the guest did not $1 within 300 s"
        sleep 0.5
    done
    qemu_pid=
}

# traffic VIP [SECONDS]: a client requesting through VIP every 100 ms, each request given
# SECONDS (default 1), one line per request in $work/traffic.log ("TIME ok" or "TIME fail").
traffic() {
    # ip netns exec, not nsx: $! must be the loop itself (ip execs it), not a subshell whose
    # kill would leave the loop running after the test.
    ip netns exec "$cns" bash -c 'while :; do
        t=$(date +%s.%N)
        if [ "$(curl -s --max-time '"${2:-1}"' "http://'"$1"'/")" = "'"$token"'" ]; then echo "$t ok"; else echo "$t fail"; fi
        sleep 0.1
    done' >"$work/traffic.log" 2>&1 &
    traffic_pid=$!
}

# outage: the longest time between two answered requests in traffic.log, in seconds, and the
# number of requests.
outage() {
    python3 - "$work/traffic.log" <<'PY'
import sys
ok = [float(l.split()[0]) for l in open(sys.argv[1]) if l.strip().endswith(" ok")]
n = sum(1 for _ in open(sys.argv[1]))
gap = max((b - a for a, b in zip(ok, ok[1:])), default=0.0)
print("%.1f %d %d" % (gap, n, len(ok)))
PY
}

# uefi: the firmware and its variables, kept across the boots of one disk.
uefi=(-drive "if=pflash,format=raw,readonly=on,file=$ovmf_code"
    -drive "if=pflash,format=raw,file=$work/vars.fd")

# --- the update bundles: this build repacked as a newer version (a second mkosi run would
# cost minutes of CI for the same bytes), and a deliberately broken one whose sluice exits 1
bundle=$(ls "$out"/sluice-update-*.tar 2>/dev/null | head -n 1)
[ -n "$bundle" ] || fail "no $out/sluice-update-*.tar: build the image first (image/build.sh)"
mkdir -p "$work/parts"
python3 - "$bundle" "$work/parts" <<'PY'
import json, sys, tarfile
with tarfile.open(sys.argv[1]) as t:
    t.extractall(sys.argv[2], filter="data")
m = json.load(open(sys.argv[2] + "/sluice-update.json"))
open(sys.argv[2] + "/version", "w").write(m["version"])
open(sys.argv[2] + "/cmdline", "w").write(m["cmdline"])
PY
built=$(cat "$work/parts/version")
# The version as a literal in the console regexes (it holds "+" and dots).
built_re=$(printf '%s' "$built" | sed 's/[][\.*^$+?(){}|]/\\&/g')
# Signed with the key image/build.sh signed this build with: the image trusts its public half.
update_key=${SLUICE_UPDATE_KEY:-$repo/.sluice-update-key/sluice-update.key}
[ -f "$update_key" ] || fail "no update signing key $update_key: build the image first (image/build.sh)"
repack() {
    python3 "$repo/image/bundle.py" "$1" --version "$2" --cmdline "$(cat "$work/parts/cmdline")" \
        --vmlinuz "$work/parts/vmlinuz" --initrd "$work/parts/initrd" --root "$3" \
        --key "$update_key" >/dev/null
}
repack "$work/next.tar" "$built-next" "$work/parts/root.img"
printf '#!/bin/sh\necho "sluice: deliberately broken build (boot test)" >&2\nexit 1\n' >"$work/broken-sluice"
cp --sparse=always "$work/parts/root.img" "$work/broken-root.img"
debugfs -w -R "rm /usr/bin/sluice" "$work/broken-root.img" >/dev/null 2>&1
debugfs -w -R "write $work/broken-sluice /usr/bin/sluice" "$work/broken-root.img" >/dev/null 2>&1
debugfs -w -R "sif /usr/bin/sluice mode 0100755" "$work/broken-root.img" >/dev/null 2>&1
debugfs -R "cat /usr/bin/sluice" "$work/broken-root.img" 2>/dev/null | grep -q "deliberately broken" ||
    fail "could not put the broken sluice into the broken bundle's root"
repack "$work/broken.tar" "$built-broken" "$work/broken-root.img"
rm -f "$work/broken-root.img"
# The broken bundle comes by URL: a mirror in the router namespace, as an operator's would be.
mkdir -p "$work/mirror"
ln "$work/broken.tar" "$work/mirror/sluice-update-broken.tar"
# Beside it an unsigned bundle, as a man in the middle would serve: refused at its manifest,
# so its root filesystem can be a dummy.
head -c 1M /dev/zero >"$work/dummy-root.img"
python3 "$repo/image/bundle.py" "$work/mirror/sluice-update-unsigned.tar" --version "$built-unsigned" \
    --cmdline "$(cat "$work/parts/cmdline")" --vmlinuz "$work/parts/vmlinuz" \
    --initrd "$work/parts/initrd" --root "$work/dummy-root.img" >/dev/null 2>&1
broken_sum=$(sha256sum "$work/broken.tar" | cut -d' ' -f1)
ip netns exec "$rns" python3 -m http.server --bind 172.30.22.1 --directory "$work/mirror" 8081 \
    >"$work/mirror.log" 2>&1 &
mirror_pid=$!
echo "boot-test: bundles: $built-next (this build, version bumped) and $built-broken (sluice exits 1), $(du -h --apparent-size "$work/next.tar" | cut -f1) each"

# --- boot 1: first boot under UEFI from the seed, on a disk larger than the image
qemu-img create -q -f qcow2 -F raw -b "$out/sluice.raw" "$work/disk1.qcow2" 5G
cp "$ovmf_vars" "$work/vars.fd"
echo "boot-test: boot 1: UEFI (OVMF), slot A, 5 GB disk, seed disk CIDATA (timeout ${boot_timeout}s, $accel)"
boot boot1 "$work/disk1.qcow2" 1 "${uefi[@]}" \
    -drive "if=virtio,format=raw,readonly=on,file=$work/seed.img" \
    -drive "if=none,id=bundle,format=raw,readonly=on,file=$work/next.tar" \
    -device virtio-blk-pci,drive=bundle,serial=bundle
wait_console "Started .{0,16}sluice\.service" "sluice.service ready"
echo "boot-test: boot 1: sluice.service ready $(elapsed "$start") s after power-on (UEFI, first boot)"
seed_lines
console_has "sluice-seed: config: /etc/sluice/sluice.toml installed from seed /dev/vd" ||
    fail "the console does not say the config came from the seed disk"
console_has "sluice-seed: network: 10-eth0.network 20-vlan42.netdev 30-vlan42.network installed .* from seed" ||
    fail "the console does not say the network files came from the seed disk"
console_has "sluice-slot: running: slot a, Sluice $built_re \(install 1\), good" ||
    fail "the console does not say that slot A runs"
state_size=$(sed -n 's/.*sluice-seed: state: \/var is \([^,]*\), \([0-9.]*\)G .*/\2/p' "$console.txt")
state_size=${state_size%%$'\n'*}
[ -n "$state_size" ] || fail "the console does not report the state partition on /var in GB (image: $image_state bytes)"
python3 -c "import sys; sys.exit(0 if $state_size * 2**30 > 4 * $image_state else 1)" ||
    fail "the state partition was not grown to the disk: ${state_size}G (image: $image_state bytes)"
echo "boot-test: state partition grown from $((image_state >> 20)) MiB to ${state_size}G at first boot"
# systemd-repart grows it in the real root only (mkosi.conf masks the initrd's copy, which
# raced the initrd's teardown of udevd and once cost a first boot its /var).
switch_line=$(grep -anm1 "Starting initrd-switch-root" "$console.txt" | cut -d: -f1)
repart_line=$(grep -anm1 "Starting systemd-repart" "$console.txt" | cut -d: -f1)
[ -n "$switch_line" ] && [ -n "$repart_line" ] ||
    fail "the console shows no switch root (line '${switch_line}') or no systemd-repart (line '${repart_line}')"
[ "$repart_line" -gt "$switch_line" ] ||
    fail "systemd-repart ran in the initrd (console line $repart_line, switch root at $switch_line)"
wait_route 203.0.113.80
check_http 203.0.113.80
# The host kernel may lack 802.1Q, so the router asks for the VLAN address itself: an ARP
# request tagged with VLAN 42 on br0, answered by the guest's eth0.42 alone.
nsx $rns python3 - "$(nsx $rns cat /sys/class/net/br0/address)" <<'PY' ||
import socket, sys, time
mine = bytes.fromhex(sys.argv[1].replace(":", ""))
guest = bytes.fromhex("525400511c0a")
want, src = socket.inet_aton("172.30.42.10"), socket.inet_aton("172.30.42.1")
arp = b"\x00\x01\x08\x00\x06\x04\x00\x01" + mine + src + b"\x00" * 6 + want
frame = b"\xff" * 6 + mine + b"\x81\x00\x00\x2a\x08\x06" + arp
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.bind(("br0", 0))
s.settimeout(1)
deadline = time.time() + 45
while time.time() < deadline:
    s.send(frame)
    end = time.time() + 1
    while time.time() < end:
        try:
            got = s.recv(2048)
        except socket.timeout:
            break
        # An ARP reply (op 2) from the guest's MAC for 172.30.42.10, tag in the frame or not.
        if b"\x00\x02" + guest + want in got:
            sys.exit(0)
sys.exit(1)
PY
    fail "the guest's VLAN 42 address 172.30.42.10 does not answer ARP on VLAN 42 within 45 s"
echo "boot-test: the seeded VLAN 42 address 172.30.42.10 answers ARP on VLAN 42"
wait_screen Overview Conntrack
echo "boot-test: ---- boot 1: the console screen on the serial line (80x24) ----"
printf '%s\n' "$shown"

# --- the upgrade A -> B while a client requests through the VIP every 100 ms, after the
# operator drained one backend from the root shell on the serial line
shell_open
guest "sluice ctl drain web-seed 172.30.23.22:8080"
[ "$rc" = 0 ] || fail "sluice ctl drain failed in the guest"
echo "boot-test: the operator drained 172.30.23.22:8080 of web-seed (sluice ctl, serial console)"
# The manual pages and Tab completion on the root shell: sluice.toml(5) shows a key of the
# configuration reference, sluice-ctl-drain(8) exists, bash completes sluice.
guest "MANWIDTH=80 man -P cat 5 sluice.toml | grep -cx ' *vip.backend.weight'"
[ "$rc" = 0 ] || fail "man 5 sluice.toml in the guest does not show vip.backend.weight"
guest "man -w sluice-ctl-drain"
[ "$rc" = 0 ] || fail "man sluice-ctl-drain: no such page in the guest"
guest "bash -lic '_completion_loader sluice; complete -p sluice' 2>/dev/null"
[ "$rc" = 0 ] || fail "bash in the guest has no completion for sluice"
echo "boot-test: man 5 sluice.toml, man sluice-ctl-drain and Tab completion work on the root shell"
# --- systemctl restart while a client requests through the VIP every 100 ms: the stopping
# process leaves its tables in /run/sluice (RuntimeDirectoryPreserve=restart) and its XDP
# program attached and holding, BGP graceful restart keeps BIRD's route, the next process
# takes the tables: no request fails (one whose SYN fell in the gap is answered after its
# client sends the SYN again, so each is given 20 s)
traffic 203.0.113.80 20
sleep 2
t0=$SECONDS
guest "systemctl restart sluice" 300
[ "$rc" = 0 ] || fail "systemctl restart sluice failed in the guest"
restart_s=$((SECONDS - t0))
sleep 3
stop "$traffic_pid"
traffic_pid=
read -r gap requests answered < <(outage)
failed=$(grep -c ' fail$' "$work/traffic.log" || true)
echo "boot-test: systemctl restart sluice took ${restart_s} s: longest gap between answers ${gap} s, $answered of $requests requests answered, $failed failed"
[ "$failed" = 0 ] || fail "$failed requests through the VIP failed across systemctl restart sluice"
guest "journalctl -b -u sluice -o cat | grep 'took over from version' | tail -n 1"
console_has "took over from version [0-9]+: [0-9]+ of [0-9]+ flows carried" ||
    fail "the restarted sluice did not take the stopped one's tables over (journal above)"
check_http 203.0.113.80
traffic 203.0.113.80
t0=$SECONDS
guest "sluice image update /dev/disk/by-id/virtio-bundle" 900
[ "$rc" = 0 ] || fail "sluice image update failed in the guest"
console_has "slot b: Sluice $built_re-next written from /dev/disk/by-id/virtio-bundle \(signed by " ||
    fail "sluice image update did not say it wrote slot b from a signed bundle"
echo "boot-test: sluice image update wrote slot B in $((SECONDS - t0)) s while serving; rebooting"
type_serial "systemctl reboot"$'\r'
wait_exit "reboot after the update"
echo "boot-test: boot 2: UEFI, slot B on trial (systemd-boot boot counting)"
boot boot2 "$work/disk1.qcow2" 1 "${uefi[@]}"
wait_console "Started .{0,16}sluice\.service" "sluice.service ready on slot B"
echo "boot-test: boot 2: sluice.service ready $(elapsed "$start") s after power-on (slot B)"
wait_console "sluice-boot-check: slot b: sluice.service is ready: this boot is good" "slot B's boot marked good"
console_has "sluice-slot: running: slot b, Sluice $built_re-next \(install 2\), on trial" ||
    fail "the console does not say that slot B runs on trial"
deadline=$((SECONDS + 120))
until [ "$(tail -n 5 "$work/traffic.log" | grep -c ' ok$')" -ge 5 ]; do
    [ $SECONDS -lt $deadline ] || fail "HTTP through the VIP did not come back after the upgrade"
    sleep 0.5
done
stop "$traffic_pid"
traffic_pid=
read -r gap requests answered < <(outage)
echo "boot-test: upgrade outage: ${gap} s without an answer ($answered of $requests requests answered, one every 100 ms)"
seed_lines
check_http 203.0.113.80
wait_route 203.0.113.80
wait_screen Overview Conntrack
shell_open
guest "sluice ctl backends web-seed"
console_has "172\.30\.23\.22:8080 +drain\*" || fail "the operator's drain did not survive the upgrade"
echo "boot-test: the config (VIP 203.0.113.80 from the seed) and the operator's drain survived the upgrade"
guest "until sluice image status | grep -q 'running: slot b.*, good$'; do sleep 2; done; sluice image status" 300
# --- an unsigned bundle from the mirror is refused before anything is written
guest "sluice image update http://172.30.22.1:8081/sluice-update-unsigned.tar" 300
[ "$rc" != 0 ] || fail "sluice image update installed an unsigned bundle"
console_has "the bundle is not signed" || fail "sluice image update did not say the bundle is not signed"
echo "boot-test: an unsigned bundle from the mirror was refused (nothing written)"
# --- the broken build into slot A, from the mirror's URL with its sha256: its trial boot
# fails and slot B boots again by itself
url=http://172.30.22.1:8081/sluice-update-broken.tar
guest "sluice image update --sha256 $broken_sum $url" 900
[ "$rc" = 0 ] || fail "sluice image update (broken bundle, by URL) failed in the guest"
console_has "slot a: Sluice $built_re-broken written from $url" ||
    fail "sluice image update did not say it wrote slot a from the URL"
echo "boot-test: sluice image update wrote slot A from $url (sha256 checked)"
type_serial "systemctl reboot"$'\r'
wait_exit "reboot after the second update"
echo "boot-test: boot 3: UEFI, slot A on trial with a sluice that exits 1"
boot boot3 "$work/disk1.qcow2" 1 "${uefi[@]}"
sluice_may_fail=1 wait_console "sluice-boot-check: slot a FAILED its trial boot" "slot A's trial boot to fail"
echo "boot-test: boot 3: the trial boot of slot A failed $(elapsed "$start") s after power-on; it reboots"
wait_exit "reboot after the failed trial boot"
echo "boot-test: boot 4: UEFI, no seed, sluice.toml as an SMBIOS credential, 2 virtio-net queues"
boot boot4 "$work/disk1.qcow2" 2 "${uefi[@]}" \
    -smbios "type=11,value=io.systemd.credential.binary:sluice.toml=$(base64 -w0 "$work/cred.toml")"
wait_console "Started .{0,16}sluice\.service" "sluice.service ready"
echo "boot-test: boot 4: sluice.service ready $(elapsed "$start") s after power-on (slot B again)"
grep -a "sluice-slot:" "$console.txt" | sed 's/^.*sluice-slot:/boot-test:   slot:/'
console_has "sluice-slot: running: slot b, Sluice $built_re-next \(install 2\), good" ||
    fail "the console does not say that slot B runs again"
console_has "sluice-slot: slot a: Sluice $built_re-broken \(install 3\) FAILED" ||
    fail "the console does not say that slot A's update failed"
console_has "sluice-slot: last failed trial boot: .* slot a: sluice.service did not start" ||
    fail "the console does not say why slot A failed"
seed_lines
console_has "sluice-seed: config: /etc/sluice/sluice.toml installed from credential sluice.toml" ||
    fail "the console does not say the config came from the credential"
console_has "sluice-seed: network: 10-eth0.network 20-vlan42.netdev 30-vlan42.network as installed before" ||
    fail "the network files installed at the first boot were not kept on the state partition"
wait_route 203.0.113.81
check_http 203.0.113.81
wait_screen "eth0 .*2 queues" "Workers +2 run"
echo "boot-test: ---- boot 4: the console screen on the serial line (80x24) ----"
printf '%s\n' "$shown"
# The API says the same as the log: zero-copy bound, or the kernel's reason why not.
shell_open
guest "sluice ctl status | grep '^interface'"
line=$(grep -aE "^interface +eth0 " "$console.txt" | tail -n 1)
echo "boot-test:   sluice ctl status: $line"
# The datapath watch's state ends the line (`· forwarding`).
grep -qE "af_xdp zero-copy queues 2 · forwarding$|af_xdp copy queues 2 \(zero-copy refused: .+\) · forwarding$" <<<"$line" ||
    fail "sluice ctl status does not say whether zero-copy was bound on eth0's 2 queues, and why not"
power_off
# --- the journal on the state partition, read from the powered-off disk: both boots are in
# it, and sluice's own lines about the datapath (queues, AF_XDP mode, the kernel's reason when
# zero-copy was refused)
qemu-img convert -O raw "$work/disk1.qcow2" "$work/disk1.raw"
read -r state_start state_bytes < <(sfdisk --json "$work/disk1.raw" | python3 -c '
import json, sys
t = json.load(sys.stdin)["partitiontable"]
p = next(p for p in t["partitions"] if p.get("name") == "sluice-state")
print(p["start"] * t.get("sectorsize", 512), p["size"] * t.get("sectorsize", 512))')
dd if="$work/disk1.raw" of="$work/state.img" bs=4M iflag=skip_bytes,count_bytes conv=sparse \
    skip="$state_start" count="$state_bytes" status=none
rm -f "$work/disk1.raw"
debugfs -R "rdump /log/journal $work" "$work/state.img" >/dev/null 2>&1 ||
    fail "cannot read /var/log/journal from the state partition"
rm -f "$work/state.img"
boots=$(journalctl -D "$work/journal" --list-boots --no-pager -q 2>/dev/null | wc -l)
[ "$boots" -ge 4 ] || fail "the journal on the state partition holds $boots boot(s), not all four"
echo "boot-test: the journal on the state partition holds the four boots of this disk"
journalctl -D "$work/journal" -b 0 -u sluice.service -o cat --no-pager -q >"$work/sluice-boot2.log" 2>&1
grep -aE "datapath interface up|zero-copy bind failed" "$work/sluice-boot2.log" | sed 's/^/boot-test:   sluice: /'
grep -aqE "datapath interface up.*queues=2" "$work/sluice-boot2.log" ||
    fail "sluice did not log eth0 up with 2 queues in the fourth boot"
grep -aqE "af_xdp=zero-copy|zero-copy bind failed \(" "$work/sluice-boot2.log" ||
    fail "sluice's log says neither that zero-copy was bound nor why it was not"

# --- boot 5: a fresh disk, nothing handed in
qemu-img create -q -f qcow2 -F raw -b "$out/sluice.raw" "$work/disk3.qcow2"
echo "boot-test: boot 5: direct kernel boot, fresh disk, no seed, no credential"
boot boot5 "$work/disk3.qcow2" 1 "${direct[@]}"
wait_console "sluice-seed: MISSING: no sluice config" "the seed's report of the missing config"
echo "boot-test: boot 5: the seed's report of what is missing $(elapsed "$start") s after power-on"
wait_screen "not configured" "MISSING: no sluice config" "MISSING: no network configuration" "CIDATA"
echo "boot-test: ---- boot 5: the console screen on the serial line (80x24) ----"
printf '%s\n' "$shown"
! console_has "Started .{0,16}sluice\.service" || fail "sluice.service started without a config"
power_off
echo "boot-test: PASS in $SECONDS s"
