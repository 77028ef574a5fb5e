#!/usr/bin/env python3
"""Writes a Sluice update bundle: a ustar archive whose first member is sluice-update.json (the
manifest: image name, format, version, architecture, kernel command line, and the size and
sha256 of every member), then sluice-update.json.minisig (the manifest's minisign signature,
made with KEY), then vmlinuz, initrd and root.img (the system slot's ext4 filesystem).
`sluice image update` reads exactly this (appliance/src/image/bundle.rs) and installs it only
when a key the image trusts signed the manifest (appliance/src/image/trust.rs).
image/build.sh makes one per build; image/boot-test.sh repacks one with another version.

    bundle.py OUT.tar --version V --cmdline "ARGS" --vmlinuz F --initrd F --root F [--key KEY]
Without --key the bundle is unsigned: an appliance installs it only with --allow-unsigned.
--format 1 writes the format of the builds before signed bundles (unsigned, no signature
member), the only one their `sluice image update` reads: for moving such an appliance to a
build that checks signatures.
Prints the bundle's sha256 (also written to OUT.tar.sha256).
"""
import argparse
import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def sign(text, key, version):
    """The minisign signature of `text` by the secret key file `key` (minisign prompts for
    its password when it has one)."""
    with tempfile.TemporaryDirectory() as d:
        manifest = os.path.join(d, "sluice-update.json")
        with open(manifest, "wb") as f:
            f.write(text)
        sig = manifest + ".minisig"
        try:
            subprocess.run(
                ["minisign", "-S", "-s", key, "-m", manifest, "-x", sig,
                 "-t", f"sluice update {version}"],
                check=True, stdout=subprocess.DEVNULL)
        except FileNotFoundError:
            sys.exit("bundle.py: minisign is missing (scripts/setup.sh installs it)")
        except subprocess.CalledProcessError as e:
            sys.exit(f"bundle.py: minisign could not sign with {key} (exit {e.returncode})")
        with open(sig, "rb") as f:
            return f.read()


def member(t, name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    t.addfile(info, io.BytesIO(data))


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("out")
    p.add_argument("--version", required=True)
    p.add_argument("--cmdline", required=True)
    p.add_argument("--vmlinuz", required=True)
    p.add_argument("--initrd", required=True)
    p.add_argument("--root", required=True)
    p.add_argument("--key", help="minisign secret key that signs the manifest")
    p.add_argument("--format", type=int, choices=(1, 2), default=2,
                   help="1: the unsigned format a sluice from before signed bundles reads")
    a = p.parse_args()
    if a.format == 1 and a.key:
        p.error("format 1 has no signature: drop --key")
    files = {"vmlinuz": a.vmlinuz, "initrd": a.initrd, "root.img": a.root}
    manifest = {
        "image": "sluice",
        "format": a.format,
        "version": a.version,
        "arch": "x86_64",
        "cmdline": a.cmdline,
        "files": {n: {"size": os.path.getsize(f), "sha256": sha256(f)} for n, f in files.items()},
    }
    text = (json.dumps(manifest, indent=2) + "\n").encode()
    signature = sign(text, a.key, a.version) if a.key else None
    if signature is None:
        print(f"bundle.py: {a.out} is NOT signed (no --key)", file=sys.stderr)
    tmp = a.out + ".tmp"
    with tarfile.open(tmp, "w", format=tarfile.USTAR_FORMAT) as t:
        member(t, "sluice-update.json", text)
        if signature is not None:
            member(t, "sluice-update.json.minisig", signature)
        for name, path in files.items():
            info = t.gettarinfo(path, arcname=name)
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            info.mode = 0o644
            with open(path, "rb") as f:
                t.addfile(info, f)
    os.replace(tmp, a.out)
    digest = sha256(a.out)
    with open(a.out + ".sha256", "w") as f:
        f.write(f"{digest}  {os.path.basename(a.out)}\n")
    print(digest)


if __name__ == "__main__":
    main()
