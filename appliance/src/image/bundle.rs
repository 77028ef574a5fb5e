//! An update bundle: a POSIX tar (ustar) whose first member is `sluice-update.json`, the
//! manifest (image name, format, version, architecture, kernel command line, and the size
//! and sha256 of every other member), then `sluice-update.json.minisig`, the manifest's
//! minisign signature (see [`super::trust`]; a lab's bundle may have none), followed by
//! `vmlinuz`, `initrd` and `root.img` (the system partition's ext4 filesystem).
//! `image/build.sh` writes it (`image/bundle.py`). Reading is streaming: each member goes
//! straight to where it is installed while its sha256 is computed, so a bundle needs no
//! scratch space; the caller makes nothing bootable until every member matched.

use std::collections::BTreeMap;
use std::io::{self, Read, Write};

use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::ImageError;

/// The manifest's name, the bundle's first member.
pub const MANIFEST: &str = "sluice-update.json";
/// The manifest's signature, the bundle's second member when it is signed.
pub const SIGNATURE: &str = "sluice-update.json.minisig";
/// The members a bundle carries besides the manifest and its signature.
pub const MEMBERS: [&str; 3] = ["vmlinuz", "initrd", "root.img"];
/// The formats this sluice reads: 1 (unsigned, before signatures) and 2 (may be signed).
const FORMATS: std::ops::RangeInclusive<u32> = 1..=2;
/// The largest manifest and signature this sluice reads.
const MANIFEST_MAX: u64 = 64 * 1024;
const SIGNATURE_MAX: u64 = 4 * 1024;
const BLOCK: usize = 512;

/// What the manifest says.
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Always `sluice`.
    pub image: String,
    pub format: u32,
    /// The build's version, shown in the boot menu and by `sluice image status`.
    pub version: String,
    pub arch: String,
    /// Kernel arguments besides `root=` and `sluice.slot=`, which the slot adds.
    pub cmdline: String,
    pub files: BTreeMap<String, FileSum>,
}

/// One member's size and sha256 (hex; read in either case, kept in lower case).
#[derive(Debug, Clone, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct FileSum {
    pub size: u64,
    pub sha256: String,
}

/// A member's header: name and size.
struct Header {
    name: String,
    size: u64,
}

/// The bundle's first members: the manifest, as parsed and as signed, and its signature.
#[derive(Debug)]
pub struct Head {
    pub manifest: Manifest,
    /// The manifest member's bytes, which the signature covers.
    pub text: Vec<u8>,
    /// The signature member's bytes, when the bundle has one.
    pub signature: Option<Vec<u8>>,
}

/// Reads the bundle from `r` member by member.
pub struct Reader<R> {
    r: R,
    /// Bytes of padding after the current member's data.
    pad: u64,
    /// A header read ahead (the first payload member of an unsigned bundle).
    ahead: Option<Header>,
}

impl<R: Read> Reader<R> {
    pub fn new(r: R) -> Reader<R> {
        Reader {
            r,
            pad: 0,
            ahead: None,
        }
    }

    /// Reads and checks the manifest and reads its signature, if the bundle has one; an
    /// error says why the input is not one of ours.
    pub fn head(&mut self) -> Result<Head, ImageError> {
        let (manifest, text) = self.manifest()?;
        let signature = match self.header()? {
            Some(h) if h.name == SIGNATURE => {
                if h.size > SIGNATURE_MAX {
                    return Err(ImageError::NotABundle(format!(
                        "{SIGNATURE} is {} bytes",
                        h.size
                    )));
                }
                let mut sig = Vec::new();
                self.copy_to(h.size, &mut sig)?;
                Some(sig)
            }
            other => {
                self.ahead = other;
                None
            }
        };
        Ok(Head {
            manifest,
            text,
            signature,
        })
    }

    /// Reads and checks the manifest: the parsed one and its bytes.
    fn manifest(&mut self) -> Result<(Manifest, Vec<u8>), ImageError> {
        let not_ours = |why: String| ImageError::NotABundle(why);
        let h = self
            .header()?
            .ok_or_else(|| not_ours("it is empty or not a tar archive".into()))?;
        if h.name != MANIFEST {
            return Err(not_ours(format!(
                "its first member is {:?}, not {MANIFEST}",
                h.name
            )));
        }
        if h.size > MANIFEST_MAX {
            return Err(not_ours(format!("{MANIFEST} is {} bytes", h.size)));
        }
        let mut text = Vec::new();
        self.copy_to(h.size, &mut text)?;
        let mut m: Manifest = serde_json::from_slice(&text)
            .map_err(|e| not_ours(format!("{MANIFEST} does not parse: {e}")))?;
        if m.image != "sluice" {
            return Err(not_ours(format!("it is an image of {:?}", m.image)));
        }
        if !FORMATS.contains(&m.format) {
            return Err(ImageError::Manifest(format!(
                "bundle format {}, this sluice reads formats {} to {}",
                m.format,
                FORMATS.start(),
                FORMATS.end()
            )));
        }
        if m.arch != std::env::consts::ARCH {
            return Err(ImageError::Manifest(format!(
                "built for {}, this appliance is {}",
                m.arch,
                std::env::consts::ARCH
            )));
        }
        for name in MEMBERS {
            let Some(f) = m.files.get_mut(name) else {
                return Err(ImageError::Manifest(format!("no {name} listed")));
            };
            if f.sha256.len() != 64 || !f.sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(ImageError::Manifest(format!("{name}: bad sha256")));
            }
            f.sha256.make_ascii_lowercase();
        }
        if let Some(extra) = m.files.keys().find(|k| !MEMBERS.contains(&k.as_str())) {
            return Err(ImageError::Manifest(format!("unknown member {extra:?}")));
        }
        Ok((m, text))
    }

    /// The input, positioned after the archive's end marker (a stream's sum needs its rest).
    pub fn into_inner(self) -> R {
        self.r
    }

    /// The next member's name and size, or `None` at the end of the archive.
    pub fn next_member(&mut self) -> Result<Option<(String, u64)>, ImageError> {
        let h = match self.ahead.take() {
            Some(h) => Some(h),
            None => self.header()?,
        };
        Ok(h.map(|h| (h.name, h.size)))
    }

    /// Copies the current member (`size` bytes) into `out`; returns its sha256 in hex.
    pub fn copy_to(&mut self, size: u64, out: &mut dyn Write) -> Result<String, ImageError> {
        let mut hash = Sha256::new();
        let mut left = size;
        let mut buf = vec![0u8; 1 << 20];
        while left > 0 {
            let n = (left as usize).min(buf.len());
            self.r.read_exact(&mut buf[..n]).map_err(ImageError::Read)?;
            hash.update(&buf[..n]);
            out.write_all(&buf[..n]).map_err(ImageError::Write)?;
            left -= n as u64;
        }
        self.skip_pad()?;
        Ok(hex(&hash.finalize()))
    }

    fn skip_pad(&mut self) -> Result<(), ImageError> {
        let pad = self.pad;
        self.pad = 0;
        io::copy(&mut (&mut self.r).take(pad), &mut io::sink()).map_err(ImageError::Read)?;
        Ok(())
    }

    fn header(&mut self) -> Result<Option<Header>, ImageError> {
        let mut b = [0u8; BLOCK];
        match self.r.read_exact(&mut b) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
            Err(e) => return Err(ImageError::Read(e)),
        }
        // Two zero blocks end an archive; one is enough to stop reading.
        if b.iter().all(|&x| x == 0) {
            return Ok(None);
        }
        let bad = |why: &str| ImageError::NotABundle(format!("a tar header is damaged ({why})"));
        if &b[257..262] != b"ustar" {
            return Err(ImageError::NotABundle("it is not a ustar archive".into()));
        }
        let stored: u32 = octal(&b[148..156]).ok_or_else(|| bad("checksum"))? as u32;
        let sum: u32 = b
            .iter()
            .enumerate()
            .map(|(i, &x)| {
                if (148..156).contains(&i) {
                    32
                } else {
                    x as u32
                }
            })
            .sum();
        if stored != sum {
            return Err(bad("checksum mismatch"));
        }
        let size = octal(&b[124..136]).ok_or_else(|| bad("size"))?;
        if !matches!(b[156], b'0' | 0) {
            return Err(bad("a member is not a regular file"));
        }
        let name = cstr(&b[0..100]);
        let prefix = cstr(&b[345..500]);
        let name = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        let name = name.trim_start_matches("./").to_string();
        self.pad = (BLOCK as u64 - size % BLOCK as u64) % BLOCK as u64;
        Ok(Some(Header { name, size }))
    }
}

fn cstr(b: &[u8]) -> String {
    let end = b.iter().position(|&x| x == 0).unwrap_or(b.len());
    String::from_utf8_lossy(&b[..end]).into_owned()
}

fn octal(b: &[u8]) -> Option<u64> {
    let s = cstr(b);
    let s = s.trim_matches(|c: char| c == ' ' || c == '\0');
    if s.is_empty() {
        return None;
    }
    u64::from_str_radix(s, 8).ok()
}

/// Lower-case hex of `b`.
pub fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A ustar member header for `name` of `size` bytes.
    fn header(name: &str, size: usize) -> [u8; BLOCK] {
        let mut h = [0u8; BLOCK];
        h[..name.len()].copy_from_slice(name.as_bytes());
        h[100..108].copy_from_slice(b"0000644\0");
        h[124..136].copy_from_slice(format!("{size:011o}\0").as_bytes());
        h[156] = b'0';
        h[257..263].copy_from_slice(b"ustar\0");
        h[263..265].copy_from_slice(b"00");
        h[148..156].copy_from_slice(b"        ");
        let sum: u32 = h.iter().map(|&x| x as u32).sum();
        h[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
        h
    }

    /// A tar of `members` in order.
    pub(crate) fn tar(members: &[(&str, &[u8])]) -> Vec<u8> {
        let mut out = Vec::new();
        for (name, data) in members {
            out.extend_from_slice(&header(name, data.len()));
            out.extend_from_slice(data);
            out.resize(out.len().div_ceil(BLOCK) * BLOCK, 0);
        }
        out.resize(out.len() + 2 * BLOCK, 0);
        out
    }

    pub(crate) fn sha(b: &[u8]) -> String {
        hex(&Sha256::digest(b))
    }

    /// A manifest for the three members as given.
    pub(crate) fn manifest_for(kernel: &[u8], initrd: &[u8], root: &[u8]) -> String {
        let f = |b: &[u8]| format!("{{\"size\": {}, \"sha256\": \"{}\"}}", b.len(), sha(b));
        format!(
            "{{\"image\": \"sluice\", \"format\": 2, \"version\": \"0.2.0\", \"arch\": \"{}\", \
             \"cmdline\": \"console=ttyS0 rw\", \"files\": {{\"vmlinuz\": {}, \"initrd\": {}, \
             \"root.img\": {}}}}}",
            std::env::consts::ARCH,
            f(kernel),
            f(initrd),
            f(root)
        )
    }

    #[test]
    fn reads_the_manifest_and_streams_members_with_their_sha256() {
        let m = manifest_for(b"kernel", b"initrd", b"root");
        let t = tar(&[
            (MANIFEST, m.as_bytes()),
            ("vmlinuz", b"kernel"),
            ("initrd", b"initrd"),
            ("root.img", b"root"),
        ]);
        let mut r = Reader::new(&t[..]);
        let head = r.head().unwrap();
        assert_eq!(head.signature, None);
        assert_eq!(head.text, m.as_bytes());
        let got = head.manifest;
        assert_eq!(got.version, "0.2.0");
        let mut seen = Vec::new();
        while let Some((name, size)) = r.next_member().unwrap() {
            let mut out = Vec::new();
            let sum = r.copy_to(size, &mut out).unwrap();
            assert_eq!(sum, got.files[&name].sha256, "{name}");
            seen.push((name, out));
        }
        assert_eq!(seen.len(), 3);
        assert_eq!(seen[2], ("root.img".to_string(), b"root".to_vec()));
    }

    #[test]
    fn refuses_what_is_not_a_sluice_bundle() {
        let other = manifest_for(b"k", b"i", b"r").replace("\"sluice\"", "\"other\"");
        let cases: Vec<(Vec<u8>, &str)> = vec![
            (Vec::new(), "empty or not a tar"),
            (vec![7u8; 4096], "not a ustar archive"),
            (tar(&[("README", b"hello")]), "first member is \"README\""),
            (tar(&[(MANIFEST, b"{not json")]), "does not parse"),
            (
                tar(&[(MANIFEST, other.as_bytes())]),
                "an image of \"other\"",
            ),
        ];
        for (bytes, want) in cases {
            let e = Reader::new(&bytes[..])
                .manifest()
                .expect_err(want)
                .to_string();
            assert!(e.contains(want), "{want:?} not in {e}");
            assert!(e.contains("not a Sluice update bundle"), "{e}");
        }
        let mut bad = tar(&[(MANIFEST, b"{}")]);
        bad[0] ^= 1;
        let e = Reader::new(&bad[..]).manifest().expect_err("checksum");
        assert!(e.to_string().contains("checksum mismatch"), "{e}");
        let no_root = manifest_for(b"k", b"i", b"r").replace("root.img", "rootfs.img");
        let e = Reader::new(&tar(&[(MANIFEST, no_root.as_bytes())])[..])
            .manifest()
            .expect_err("members");
        assert!(e.to_string().contains("no root.img listed"), "{e}");
    }

    #[test]
    fn reads_upper_case_sums_and_both_formats_and_no_other() {
        let m = manifest_for(b"kernel", b"initrd", b"root");
        let upper = m.replace(&sha(b"root"), &sha(b"root").to_ascii_uppercase());
        assert_ne!(upper, m);
        let t = tar(&[(MANIFEST, upper.as_bytes())]);
        let head = Reader::new(&t[..]).head().expect("upper-case hex is hex");
        assert_eq!(head.manifest.files["root.img"].sha256, sha(b"root"));
        let one = m.replace("\"format\": 2", "\"format\": 1");
        assert!(
            Reader::new(&tar(&[(MANIFEST, one.as_bytes())])[..])
                .head()
                .is_ok()
        );
        let three = m.replace("\"format\": 2", "\"format\": 3");
        let e = Reader::new(&tar(&[(MANIFEST, three.as_bytes())])[..])
            .head()
            .expect_err("format 3");
        assert!(e.to_string().contains("bundle format 3"), "{e}");
    }

    #[test]
    fn the_signature_member_is_read_after_the_manifest() {
        let m = manifest_for(b"k", b"i", b"r");
        let t = tar(&[
            (MANIFEST, m.as_bytes()),
            (SIGNATURE, b"sig"),
            ("vmlinuz", b"k"),
        ]);
        let mut r = Reader::new(&t[..]);
        let head = r.head().unwrap();
        assert_eq!(head.signature.as_deref(), Some(&b"sig"[..]));
        assert_eq!(r.next_member().unwrap(), Some(("vmlinuz".to_string(), 1)));
        let big = vec![b'x'; 5000];
        let t = tar(&[(MANIFEST, m.as_bytes()), (SIGNATURE, &big)]);
        let e = Reader::new(&t[..]).head().expect_err("too big");
        assert!(e.to_string().contains("5000 bytes"), "{e}");
    }
}
