//! Why an image command failed; each message says what to do, and what became of the slots.

use std::io;
use std::path::PathBuf;

use super::slots::Slot;

/// Why an image command failed.
#[derive(Debug, thiserror::Error)]
pub enum ImageError {
    #[error(
        "not a Sluice update bundle: {0} (give the sluice-update-*.tar that image/build.sh writes)"
    )]
    NotABundle(String),
    #[error(
        "cannot download {url}: {reason} (is the URL right, and the server reachable from the \
         appliance?); the running slot is untouched"
    )]
    Fetch { url: String, reason: String },
    #[error("--ca-file {}: {reason} (the PEM certificates of the mirror's CA)", .path.display())]
    Ca { path: PathBuf, reason: String },
    #[error(
        "refused {url}: it redirects from https to plain http ({reason}); a bundle asked for \
         over https is fetched over https only (give the final https URL, or fix the \
         mirror); the running slot is untouched"
    )]
    Downgrade { url: String, reason: String },
    #[error(
        "the bundle's sha256 is {got}, not the {want} given: it is damaged or not the one \
         meant; slot {slot} is left without a boot entry, the running slot is untouched"
    )]
    BundleSum {
        got: String,
        want: String,
        slot: Slot,
    },
    #[error("the bundle's manifest cannot be used: {0}")]
    Manifest(String),
    #[error("cannot open {path}: {source}")]
    Open {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("reading the bundle: {0} (is it complete, is the server still sending?)")]
    Read(#[source] io::Error),
    #[error("writing the slot: {0}")]
    Write(#[source] io::Error),
    #[error("the ESP at {path}: {source} (is it mounted? /efi, see image/README.md)")]
    Esp {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error(
        "the ESP has {free} bytes free, the bundle's kernel and initrd need {need}: remove \
         what is not Sluice's from /efi; nothing was written"
    )]
    EspFull { need: u64, free: u64 },
    #[error(
        "{member}: sha256 {got}, the manifest says {want}: the bundle is damaged (download it \
         again); slot {slot} is left without a boot entry, the running slot is untouched"
    )]
    MemberSum {
        member: String,
        got: String,
        want: String,
        slot: Slot,
    },
    #[error(
        "{member}: the archive holds {held} bytes, the manifest says {want}: the bundle is \
         damaged or forged; nothing of it was written there, slot {slot} is left without a \
         boot entry, the running slot is untouched"
    )]
    MemberSize {
        member: String,
        held: u64,
        want: u64,
        slot: Slot,
    },
    #[error(
        "{0}: missing from the bundle (or listed twice); slot {1} is left without a boot entry"
    )]
    Missing(String, Slot),
    #[error(
        "root.img is {need} bytes, slot {slot}'s partition {have}: this bundle needs a new disk layout"
    )]
    TooBig { need: u64, have: u64, slot: Slot },
    #[error("root.img is not an ext4 filesystem")]
    NotExt4,
    #[error(
        "cannot tell the running slot: no sluice.slot= on the kernel command line (booted \
         without systemd-boot's slot entries?); nothing was written"
    )]
    NoSlot,
    #[error(
        "slot {0} runs on trial (its boot is not marked good yet: sluice.service not ready?); \
         updating now would leave no good slot to fall back to; wait, see sluice image status"
    )]
    OnTrial(Slot),
    #[error(
        "the bundle is not signed: this appliance installs bundles signed by a key in {keys} \
         (image/build.sh signs every bundle it writes; --allow-unsigned installs an unsigned \
         one, for a lab only); nothing was written"
    )]
    Unsigned { keys: PathBuf },
    #[error(
        "the bundle is signed by a key this image does not trust ({why}): it trusts the keys \
         in {keys} only (the public halves of the keys its builds were signed with; \
         --allow-unsigned installs it anyway, for a lab only); nothing was written"
    )]
    UnknownSigner { keys: PathBuf, why: String },
    #[error(
        "the bundle's signature by {key} does not match its manifest: it was changed after it \
         was signed, or forged; nothing was written"
    )]
    BadSignature { key: String },
    #[error("the bundle's signature cannot be read: {0} (not a minisign signature)")]
    Signature(String),
    #[error("update key {path}: {reason} (a minisign public key file, as minisign -G writes)")]
    Key { path: PathBuf, reason: String },
    #[error(
        "another `sluice image update` is running (it holds {0}); wait for it to finish, then \
         see sluice image status"
    )]
    Busy(PathBuf),
    #[error("the update lock {path}: {source}")]
    Lock {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
}
