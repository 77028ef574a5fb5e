#!/usr/bin/env bash
# Builds the Sluice appliance image from a fresh clone, as root, in one command:
#   image/build.sh
# Installs what the build needs (bookworm-backports for mkosi 24.3; the project's build
# dependencies through scripts/setup.sh), builds the release `sluice` binary, and runs mkosi.
# Output in mkosi.output/: sluice.raw (GPT disk: ESP with systemd-boot and a unified kernel
# image, ext4 root; boots under UEFI), sluice.raw.zst (the same, compressed, to ship),
# sluice.vmlinuz + sluice.initrd (qemu direct boot, used by image/boot-test.sh), and the
# build's signed update bundle.
#
# Update signing (see image/README.md, "Signed updates"): SLUICE_UPDATE_KEY names the
# minisign secret key that signs the bundle (a release key kept off the build machine's
# clone, password-protected: minisign asks for its password). Without it the key is
# .sluice-update-key/sluice-update.key, generated without a password on the first build
# (labs and CI; gitignored). The image trusts the key's public half (KEY with .pub for
# .key, next to it) and any more public keys in SLUICE_UPDATE_TRUST (space-separated .pub
# files, e.g. the next release key before it signs anything): they are installed in
# /usr/lib/sluice/update-keys/.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

if [ "$(id -u)" != 0 ]; then
    echo "build.sh: run as root (it installs Debian packages and mkosi needs root)" >&2
    exit 1
fi

export DEBIAN_FRONTEND=noninteractive

# bookworm-backports carries mkosi 24.3 and systemd 254 (repart, ukify); Debian 12's mkosi 14
# cannot make a bootable disk on hosts whose kernel lacks vfat. Added once, by any name.
if ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
    echo "build.sh: adding bookworm-backports to apt sources"
    cat >/etc/apt/sources.list.d/bookworm-backports.sources <<'SOURCES'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
    apt-get update -qq
fi

installed() {
    dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"
}

mkosi_version=$(dpkg-query -W -f='${Version}' mkosi 2>/dev/null || true)
if [ -z "$mkosi_version" ] || dpkg --compare-versions "$mkosi_version" lt 24; then
    echo "build.sh: installing mkosi from bookworm-backports"
    apt-get update -qq
    # mkosi alone from backports: its dependencies come from bookworm, so the host's systemd
    # stays as it is (repart, bootctl and ukify 254 are unpacked below instead).
    apt-get install -y -qq --no-install-recommends mkosi/bookworm-backports
fi
# qemu for image/boot-test.sh (qemu-img makes its disk overlays): bookworm-backports' (the
# preinstalled qemu-utils is that version and conflicts with bookworm's).
if ! installed qemu-system-x86 || ! installed qemu-utils; then
    echo "build.sh: installing qemu-system-x86 and qemu-utils from bookworm-backports"
    apt-get install -y -qq --no-install-recommends -t bookworm-backports qemu-system-x86 qemu-utils
fi

# Host tools mkosi calls: kmod (module dependencies), pefile (UKI), dosfstools + mtools (ESP
# without mounting it), e2fsprogs (root), zstd (the shipped image), cpio (initrd),
# reprepro (the local repository for the backports kernel), python3-pyte (boot-test.sh
# replays the serial console through it to show the console screen; mtools also writes its
# seed disk), ovmf (UEFI firmware for booting the disk in qemu).
host=(kmod python3-pefile dosfstools mtools e2fsprogs zstd cpio debian-archive-keyring
    bubblewrap systemd-container binutils reprepro python3-pyte ovmf)
missing=()
for p in "${host[@]}"; do
    installed "$p" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
    echo "build.sh: installing ${missing[*]}"
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# systemd-repart, bootctl and ukify 254 or newer, without replacing the host's systemd: unpack the
# backports packages into .image-tools/ and let mkosi find them there (ExtraSearchPaths=).
tools="$repo/.image-tools"
repart_version() {
    "$1" --version 2>/dev/null | awk 'NR == 1 { print $2 }'
}
if [ ! -x "$tools/bin/systemd-repart" ] || [ ! -x "$tools/bin/bootctl" ] || [ "$(repart_version "$tools/bin/systemd-repart")" -lt 254 ]; then
    echo "build.sh: unpacking systemd-repart, bootctl and ukify from bookworm-backports into .image-tools/"
    rm -rf "$tools"
    mkdir -p "$tools/bin/.root" "$tools/debs"
    (cd "$tools/debs" && apt-get download -q -t bookworm-backports systemd systemd-boot libsystemd-shared)
    for deb in "$tools"/debs/*.deb; do
        dpkg-deb -x "$deb" "$tools/bin/.root"
    done
    root="$tools/bin/.root"
    for tool in bin/systemd-repart usr/bin/bootctl; do
        cat >"$tools/bin/${tool##*/}" <<WRAPPER
#!/bin/sh
# ${tool##*/} from bookworm-backports with its own libsystemd-shared (see image/build.sh).
root=\$(dirname "\$(readlink -f "\$0")")/.root
exec env LD_LIBRARY_PATH="\$root/usr/lib/x86_64-linux-gnu/systemd" "\$root/$tool" "\$@"
WRAPPER
        chmod 755 "$tools/bin/${tool##*/}"
    done
    cp "$root/lib/systemd/ukify" "$tools/bin/ukify"
    rm -rf "$tools/debs"
fi
echo "build.sh: systemd-repart $(repart_version "$tools/bin/systemd-repart") from .image-tools/"

# The bookworm-backports kernel (6.12: AF_XDP zero-copy on virtio-net) as local packages for
# mkosi (PackageDirectories=): putting backports in the image's sources would break the
# default initrd's package list.
kernel=$(apt-cache depends -t bookworm-backports linux-image-amd64 |
    awk '/Depends: linux-image-[0-9]/ { print $2; exit }')
[ -n "$kernel" ] || { echo "build.sh: no linux-image-amd64 in bookworm-backports" >&2; exit 1; }
if ! ls "$tools/packages/${kernel}_"*.deb >/dev/null 2>&1; then
    echo "build.sh: downloading $kernel from bookworm-backports"
    rm -rf "$tools/packages"
    mkdir -p "$tools/packages"
    (cd "$tools/packages" && apt-get download -q -t bookworm-backports linux-image-amd64 "$kernel")
fi

# The project's own build dependencies (clang for the XDP program, libelf, ...), minisign
# and cargo.
scripts/setup.sh

# The key that signs this build's update bundle, and the public keys the image trusts.
update_key=${SLUICE_UPDATE_KEY:-$repo/.sluice-update-key/sluice-update.key}
update_pub=${update_key%.key}.pub
if [ ! -f "$update_key" ]; then
    [ -z "${SLUICE_UPDATE_KEY:-}" ] || { echo "build.sh: SLUICE_UPDATE_KEY $update_key does not exist" >&2; exit 1; }
    echo "build.sh: no update signing key yet: generating $update_key (no password: for labs and CI; give a release key with SLUICE_UPDATE_KEY)"
    mkdir -p -m 0700 "$(dirname "$update_key")"
    minisign -G -W -p "$update_pub" -s "$update_key" >/dev/null
fi
[ -f "$update_pub" ] || { echo "build.sh: $update_pub (the public half of $update_key) is missing" >&2; exit 1; }
rm -rf "$tools/update-keys"
mkdir -p "$tools/update-keys"
for pub in "$update_pub" ${SLUICE_UPDATE_TRUST:-}; do
    [ -f "$pub" ] || { echo "build.sh: update key $pub is missing" >&2; exit 1; }
    cp "$pub" "$tools/update-keys/$(basename "$pub")"
done
echo "build.sh: update bundles signed by $update_key; the image trusts $(cd "$tools/update-keys" && echo *)"

# SLUICE_IMAGE_PROFILE=debug puts target/debug/sluice in the image instead of the release
# build (CI has built it already for its tests; a release build would cost minutes more).
# SLUICE_IMAGE_NO_CARGO=1 uses the binary as it is.
profile=${SLUICE_IMAGE_PROFILE:-release}
case "$profile" in
release) cargo_profile=(--release) ;;
debug) cargo_profile=() ;;
*) echo "build.sh: SLUICE_IMAGE_PROFILE is release or debug, not '$profile'" >&2; exit 1 ;;
esac
if [ "${SLUICE_IMAGE_NO_CARGO:-0}" != 1 ]; then
    echo "build.sh: building the $profile binary"
    cargo build "${cargo_profile[@]}" -p appliance --bin sluice
fi
bin=target/$profile/sluice
[ -x "$bin" ] || { echo "build.sh: $bin is missing (cargo build ${cargo_profile[*]} -p appliance)" >&2; exit 1; }
# The seed's config is checked by this binary at boot; the example must pass it.
"$bin" check --config examples/sluice.toml >/dev/null
# The image gets the binary without debug info (mkosi.conf takes it from .image-tools/).
strip --strip-debug -o "$tools/sluice" "$bin"
echo "build.sh: image binary: $bin, $(du -h "$tools/sluice" | cut -f1) stripped"
# The manual pages (sluice(8), a page per subcommand, sluice.toml(5)) and the bash
# completion, generated by this binary, for /usr/local/share/man and bash-completion's
# directory (mkosi.conf ExtraTrees=): `man sluice` and Tab on the appliance's root shell.
rm -rf "$tools/man" "$tools/completions"
mkdir -p "$tools/man/man5" "$tools/man/man8" "$tools/completions"
"$bin" man --dir "$tools/man/man8" >/dev/null
mv "$tools/man/man8/"*.5 "$tools/man/man5/"
gzip -9n "$tools/man/man5/"* "$tools/man/man8/"*
"$bin" completions bash >"$tools/completions/sluice"
echo "build.sh: $(find "$tools/man" -name '*.gz' | wc -l) manual pages and the bash completion"

# part NAME: the byte offset and size of the partition labelled NAME in sluice.raw.
part() {
    sfdisk --json "$out/sluice.raw" | python3 -c '
import json, sys
t = json.load(sys.stdin)["partitiontable"]
p = next(p for p in t["partitions"] if p.get("name") == sys.argv[1])
print(p["start"] * t.get("sectorsize", 512), p["size"] * t.get("sectorsize", 512))' "$1"
}

# slots OUT: makes the disk's ESP boot system slot A through a boot loader entry of its own
# (kernel and initrd in /sluice/a/, root=PARTLABEL=sluice-root-a) in place of mkosi's unified
# kernel image, whose command line names no slot; then writes the update bundle of this build
# (sluice-update-VERSION.tar: the kernel, initrd and slot A's filesystem, image/bundle.py,
# signed with the update key).
slots() {
    local out=$1 esp_off esp_size root_off root_size tmp cmdline version
    read -r esp_off esp_size < <(part sluice-esp)
    read -r root_off root_size < <(part sluice-root-a)
    tmp=$(mktemp -d "$out/.slots.XXXXXX")
    # The kernel command line of mkosi.conf (KernelCommandLine=), one argument a line there.
    cmdline=$(awk '/^KernelCommandLine=/ { on = 1; next }
        on && /^[ \t]+[^ \t#]/ { sub(/^[ \t]+/, ""); printf "%s ", $0; next }
        on { exit }' mkosi.conf)
    cmdline=${cmdline% }
    version=${SLUICE_IMAGE_VERSION:-$(.image-tools/sluice --version | awk '{ print $2 }')+$(git rev-parse --short HEAD 2>/dev/null || echo local)}
    export MTOOLS_SKIP_CHECK=1
    local esp="$out/sluice.raw@@$esp_off"
    mdel -i "$esp" '::/EFI/Linux/*.efi' 2>/dev/null || true
    mdel -i "$esp" '::/loader/entries/*' 2>/dev/null || true
    mmd -i "$esp" ::/sluice ::/sluice/a 2>/dev/null || true
    mmd -i "$esp" ::/loader ::/loader/entries 2>/dev/null || true
    mcopy -o -i "$esp" "$out/sluice.vmlinuz" ::/sluice/a/vmlinuz
    mcopy -o -i "$esp" "$out/sluice.initrd" ::/sluice/a/initrd
    # No menu (a key held at power-on shows it); the newest entry with tries left boots.
    printf 'timeout 0\neditor no\n' >"$tmp/loader.conf"
    mcopy -o -i "$esp" "$tmp/loader.conf" ::/loader/loader.conf
    # The format `sluice image update` writes (appliance/src/image/slots.rs); slot A from
    # the factory is good (no boot counter).
    printf 'title Sluice %s (slot a)\nsort-key sluice\nversion 1\nlinux /sluice/a/vmlinuz\ninitrd /sluice/a/initrd\noptions root=PARTLABEL=sluice-root-a sluice.slot=a %s\n' \
        "$version" "$cmdline" >"$tmp/sluice-a.conf"
    mcopy -o -i "$esp" "$tmp/sluice-a.conf" ::/loader/entries/sluice-a.conf
    echo "build.sh: ESP: slot A's entry (Sluice $version), mkosi's unified kernel image removed"
    mdir -i "$esp" -/ -b :: | sed 's/^/build.sh:   ESP /'
    # The bundle: slot A's filesystem shrunk to its minimum, with the kernel and initrd.
    dd if="$out/sluice.raw" of="$tmp/root.img" bs=4M iflag=skip_bytes,count_bytes conv=sparse \
        skip="$root_off" count="$root_size" status=none
    # Exit status 1: e2fsck fixed something (a fresh filesystem: counts), which is fine.
    e2fsck -fp "$tmp/root.img" >/dev/null || [ $? -le 1 ]
    resize2fs -M "$tmp/root.img" >/dev/null 2>&1
    local blocks bsize
    blocks=$(dumpe2fs -h "$tmp/root.img" 2>/dev/null | awk -F: '/^Block count/ { gsub(/ /, "", $2); print $2 }')
    bsize=$(dumpe2fs -h "$tmp/root.img" 2>/dev/null | awk -F: '/^Block size/ { gsub(/ /, "", $2); print $2 }')
    truncate -s $((blocks * bsize)) "$tmp/root.img"
    rm -f "$out"/sluice-update-*.tar "$out"/sluice-update-*.tar.sha256
    local bundle="$out/sluice-update-$version.tar"
    python3 image/bundle.py "$bundle" --version "$version" --cmdline "$cmdline" \
        --vmlinuz "$out/sluice.vmlinuz" --initrd "$out/sluice.initrd" --root "$tmp/root.img" \
        --key "$update_key" >/dev/null
    echo "build.sh: update bundle $bundle ($(du -h --apparent-size "$bundle" | cut -f1); root filesystem $((blocks * bsize >> 20)) MiB of slot A's $((root_size >> 20)) MiB)"
    rm -rf "$tmp"
}

echo "build.sh: building the image with mkosi"
start=$(date +%s)
mkosi --force build
echo "build.sh: mkosi took $(($(date +%s) - start)) s"

out=mkosi.output
slots "$out"
rm -f "$out/sluice.raw.zst"
zstd -q -T0 -10 --long=27 "$out/sluice.raw" -o "$out/sluice.raw.zst"
echo "build.sh: image files:"
ls -l "$out"/sluice.raw "$out"/sluice.raw.zst "$out"/sluice.vmlinuz "$out"/sluice.initrd "$out"/sluice.efi 2>/dev/null || true
echo "build.sh: raw $(du -h --apparent-size "$out/sluice.raw" | cut -f1) (allocated $(du -h "$out/sluice.raw" | cut -f1)), compressed $(du -h "$out/sluice.raw.zst" | cut -f1)"
