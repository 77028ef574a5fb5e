#!/bin/sh
# mkosi PostInstallationScripts= (runs on the build host, the image at $BUILDROOT): points the
# two places an operator configures, /etc/sluice and /etc/systemd/network, at the state
# partition (/var, mkosi.repart/20-state.conf), so what the seed installed and what the
# operator edited survive an upgrade of the system partition. The image ships no config and no
# address of its own: sluice-seed.service installs them at first boot.
set -eu
rm -rf "$BUILDROOT/etc/systemd/network" "$BUILDROOT/etc/sluice"
ln -s /var/lib/sluice/network "$BUILDROOT/etc/systemd/network"
ln -s /var/lib/sluice/config "$BUILDROOT/etc/sluice"
mkdir -p "$BUILDROOT/var/lib/sluice/network" "$BUILDROOT/var/lib/sluice/config"
# journald keeps the journal on the state partition (Storage=auto with the directory present).
mkdir -p "$BUILDROOT/var/log/journal"
# The ESP's mount point (etc/fstab): the system slots' boot loader entries (sluice image).
mkdir -p "$BUILDROOT/efi"
# man-db's daily index run (apropos) has nothing to index on an appliance: its pages are
# read with `man` directly. The timer would only spend the machine's CPU; masked, so that no
# preset enables it again.
rm -f "$BUILDROOT/etc/systemd/system/timers.target.wants/man-db.timer"
ln -sf /dev/null "$BUILDROOT/etc/systemd/system/man-db.timer"
