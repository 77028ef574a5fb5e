#!/usr/bin/env bash
# Installs everything Sluice needs to build, test and run its lab on a fresh Debian 12 machine.
# Idempotent: safe to run again; it only installs what is missing.
set -euo pipefail

if [ "$(id -u)" != 0 ]; then
    echo "setup.sh: run as root (it installs Debian packages)" >&2
    exit 1
fi

packages=(
    # build: the XDP program (clang, llvm), libbpf/libxdp (libelf, zlib, m4, kernel headers)
    clang llvm libelf-dev zlib1g-dev pkg-config m4 linux-libc-dev make gcc
    # labs and tests: namespaces, veth, nftables, captures, traffic
    iproute2 ethtool nftables iputils-ping curl socat python3 tmux procps kmod
    # tests/flood.rs: spoofed-source SYN, ACK and UDP floods (one hping3 process at a time)
    hping3
    # tests/api.rs parses the metrics scrape with the Prometheus project's own parser
    python3-prometheus-client
    # BGP peers for the integration tests
    bird2 frr gobgpd
    # tests/client_address.rs: nginx as a FullNAT backend reading PROXY v2, tcpdump to
    # capture the TOA option at a backend
    nginx tcpdump
    # wire's pcapng tests: tcpdump and tshark must both read the files `sluice capture` writes
    tshark
    # tests/fleet.rs: a real etcd v3 cluster; the etcd-client crate's build compiles etcd's
    # .proto files with protoc; openssl makes the certificates of its TLS cluster
    etcd-server etcd-client protobuf-compiler openssl
    # scripts/soak.sh: runs a timing-sensitive test many times with the CPUs loaded
    stress-ng
    # image/build.sh and image/bundle.py sign update bundles (the image tests check a
    # bundle it signed)
    minisign
    # tests/cli_docs.rs: the shells `sluice completions` writes for check its scripts, and
    # man renders sluice.toml(5)
    zsh fish man-db
    # tests/dashboards.rs: promtool checks docs/prometheus/sluice.rules.yml and its queries
    prometheus
)

missing=()
for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
        missing+=("$p")
    fi
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "setup.sh: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The router daemons, nginx, etcd and prometheus must not run as system services: tests start their own
# instances.
for svc in bird frr gobgpd nginx etcd prometheus; do
    systemctl disable --now "$svc" >/dev/null 2>&1 || true
done

if ! command -v cargo >/dev/null 2>&1; then
    echo "setup.sh: cargo not found; install the Rust toolchain (stable 1.95 or newer)" >&2
    exit 1
fi

# mdBook builds the operator's manual (docs/book.toml); tests/cli_docs.rs builds it and checks
# its links. Not in Debian 12: built from crates.io once, without the serve/watch/search
# features the tests do not use, and unoptimised (--debug: half the compile time, about 80 s
# of CPU; a small book builds in well under a second either way).
MDBOOK_VERSION=0.5.4
if ! mdbook --version 2>/dev/null | grep -q "v$MDBOOK_VERSION"; then
    echo "setup.sh: installing mdbook $MDBOOK_VERSION (cargo install)"
    cargo install mdbook --version "$MDBOOK_VERSION" --debug --no-default-features --locked --quiet
fi

# bpffs for pinned maps, when the host has not mounted it.
if ! mountpoint -q /sys/fs/bpf 2>/dev/null; then
    mount -t bpf bpf /sys/fs/bpf 2>/dev/null || true
fi
echo "setup.sh: ready"
