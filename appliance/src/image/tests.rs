//! `update` and `status` on a scratch tree: an ESP directory, partitions as files, a
//! kernel command line, a directory of trusted keys. Downloads: `net_tests.rs`.

use std::io::Write;

use super::bundle::tests::{manifest_for, sha, tar};
use super::slots::Slot;
use super::*;

pub(super) struct Tree {
    pub(super) root: PathBuf,
    pub(super) paths: Paths,
    /// The key the tree's image trusts (`keys/test.pub`).
    pub(super) key: minisign::KeyPair,
}

impl Tree {
    pub(super) fn new(tag: &str, slot: &str) -> Tree {
        let root = std::env::temp_dir().join(format!("sluice-image-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let paths = Paths {
            esp: root.join("esp"),
            partitions: root.join("dev"),
            cmdline: root.join("cmdline"),
            failures: root.join("slot-failures.log"),
            keys: root.join("keys"),
            lock: root.join("run/image-update.lock"),
        };
        fs::create_dir_all(slots::entries_dir(&paths.esp)).unwrap();
        fs::create_dir_all(&paths.partitions).unwrap();
        fs::create_dir_all(&paths.keys).unwrap();
        for s in ["a", "b"] {
            fs::write(
                paths.partitions.join(format!("sluice-root-{s}")),
                vec![0u8; 64 << 10],
            )
            .unwrap();
        }
        fs::write(
            &paths.cmdline,
            format!("root=PARTLABEL=sluice-root-{slot} sluice.slot={slot} rw\n"),
        )
        .unwrap();
        let (_, a) = slots::entry(Slot::A, 1, "0.1.0", "rw", 3);
        fs::write(slots::entries_dir(&paths.esp).join("sluice-a.conf"), a).unwrap();
        let key = minisign::KeyPair::generate_unencrypted_keypair().unwrap();
        let public = key.pk.to_box().unwrap().into_string();
        fs::write(paths.keys.join("test.pub"), public).unwrap();
        Tree { root, paths, key }
    }

    pub(super) fn file(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.root.join(name);
        fs::write(&p, bytes).unwrap();
        p
    }

    pub(super) fn entry_names(&self) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(slots::entries_dir(&self.paths.esp))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    /// Slot `s`'s partition.
    pub(super) fn part(&self, s: &str) -> Vec<u8> {
        fs::read(self.paths.partitions.join(format!("sluice-root-{s}"))).unwrap()
    }

    /// Every file under the ESP's `sluice/` (the slots' kernels and initrds, and anything
    /// left behind).
    pub(super) fn esp_files(&self) -> Vec<String> {
        let mut v = Vec::new();
        for s in ["a", "b"] {
            if let Ok(d) = fs::read_dir(self.paths.esp.join("sluice").join(s)) {
                for e in d {
                    v.push(format!("{s}/{}", e.unwrap().file_name().to_string_lossy()));
                }
            }
        }
        v.sort();
        v
    }

    /// A bundle of `root` signed with the tree's key.
    pub(super) fn signed(&self, root: &[u8]) -> Vec<u8> {
        signed_by(&self.key, &manifest_for(b"kernel", b"initrd", root), root)
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

/// The minisign signature of `text` by `key`.
pub(super) fn sign(key: &minisign::KeyPair, text: &[u8]) -> String {
    minisign::sign(
        Some(&key.pk),
        &key.sk,
        std::io::Cursor::new(text),
        Some("sluice update 0.2.0"),
        None,
    )
    .unwrap()
    .into_string()
}

/// A bundle with `manifest`, its signature by `key`, and the members.
pub(super) fn signed_by(key: &minisign::KeyPair, manifest: &str, root: &[u8]) -> Vec<u8> {
    let sig = sign(key, manifest.as_bytes());
    tar(&[
        (bundle::MANIFEST, manifest.as_bytes()),
        (bundle::SIGNATURE, sig.as_bytes()),
        ("vmlinuz", b"kernel"),
        ("initrd", b"initrd"),
        ("root.img", root),
    ])
}

pub(super) fn ext4(len: usize) -> Vec<u8> {
    let mut r = vec![0u8; len];
    r[1080] = 0x53;
    r[1081] = 0xef;
    r[3000] = 7;
    r
}

/// A bundle without a signature.
fn unsigned(root: &[u8]) -> Vec<u8> {
    let m = manifest_for(b"kernel", b"initrd", root);
    tar(&[
        (bundle::MANIFEST, m.as_bytes()),
        ("vmlinuz", b"kernel"),
        ("initrd", b"initrd"),
        ("root.img", root),
    ])
}

pub(super) const U: Update = Update {
    sha256: None,
    tries: 3,
    allow_unsigned: false,
    download: Download {
        ca: None,
        connect: std::time::Duration::from_secs(10),
        idle: std::time::Duration::from_secs(10),
        body: std::time::Duration::from_secs(60),
    },
};

#[test]
fn update_writes_the_other_slot_and_gives_it_a_counted_entry() {
    let t = Tree::new("ok", "a");
    let root = ext4(8192);
    let b = t.signed(&root);
    let f = t.file("bundle.tar", &b);
    let u = Update {
        sha256: Some(sha(&b)),
        ..U
    };
    let said = update(&Source::File(f.clone()), &u, &t.paths).unwrap();
    assert!(said.starts_with("slot b: Sluice 0.2.0 written"), "{said}");
    assert!(said.contains("signed by test.pub"), "{said}");
    assert_eq!(t.entry_names(), ["sluice-a.conf", "sluice-b+3.conf"]);
    let part = t.part("b");
    assert_eq!(&part[..root.len()], &root[..]);
    assert_eq!(part.len(), 64 << 10, "the partition keeps its size");
    assert_eq!(
        fs::read(t.paths.esp.join("sluice/b/vmlinuz")).unwrap(),
        b"kernel"
    );
    assert_eq!(t.esp_files(), ["b/initrd", "b/vmlinuz"]);
    let text =
        fs::read_to_string(slots::entries_dir(&t.paths.esp).join("sluice-b+3.conf")).unwrap();
    assert!(text.contains("version 2\n"), "{text}");
    let s = status(&t.paths).unwrap();
    assert!(
        s.contains("running: slot a, Sluice 0.1.0 (install 1), good"),
        "{s}"
    );
    assert!(
        s.contains("slot b: Sluice 0.2.0 (install 2) installed"),
        "{s}"
    );
}

#[test]
fn a_damaged_or_foreign_bundle_leaves_the_other_slot_unbootable_and_the_running_one_alone() {
    let t = Tree::new("bad", "a");
    let mut b = t.signed(&ext4(8192));
    let at = b.len() - 2048 - 512 - 100;
    b[at] ^= 0xff;
    let f = t.file("damaged.tar", &b);
    let e = update(&Source::File(f.clone()), &U, &t.paths)
        .expect_err("damaged")
        .to_string();
    assert!(
        e.contains("root.img: sha256") && e.contains("damaged"),
        "{e}"
    );
    assert_eq!(t.entry_names(), ["sluice-a.conf"]);

    let f = t.file("sum.tar", &t.signed(&ext4(8192)));
    let u = Update {
        sha256: Some("00".repeat(32)),
        ..U
    };
    let e = update(&Source::File(f.clone()), &u, &t.paths)
        .expect_err("sum")
        .to_string();
    assert!(e.contains("bundle's sha256") && e.contains("slot b"), "{e}");
    assert_eq!(t.entry_names(), ["sluice-a.conf"]);

    let f = t.file("notext4.tar", &t.signed(&[1u8; 4096]));
    let e = update(&Source::File(f.clone()), &U, &t.paths)
        .expect_err("not ext4")
        .to_string();
    assert!(e.contains("not an ext4 filesystem"), "{e}");

    let f = t.file("big.tar", &t.signed(&ext4(128 << 10)));
    let e = update(&Source::File(f.clone()), &U, &t.paths)
        .expect_err("too big")
        .to_string();
    assert!(e.contains("slot b's partition 65536"), "{e}");

    let f = t.file("raw.img", &[0u8; 8192]);
    let e = update(&Source::File(f.clone()), &U, &t.paths)
        .expect_err("not a bundle")
        .to_string();
    assert!(e.contains("not a Sluice update bundle"), "{e}");
    assert_eq!(t.entry_names(), ["sluice-a.conf"]);
    let files = t.esp_files();
    assert!(
        !files.iter().any(|f| f.contains("/.")),
        "no temporary file left on the ESP: {files:?}"
    );
}

#[test]
fn an_unsigned_bundle_or_one_of_an_unknown_key_is_refused_unless_allowed() {
    let t = Tree::new("unsigned", "a");
    let root = ext4(8192);
    let other = minisign::KeyPair::generate_unencrypted_keypair().unwrap();
    let m = manifest_for(b"kernel", b"initrd", &root);
    for (name, b, want) in [
        ("unsigned.tar", unsigned(&root), "the bundle is not signed"),
        (
            "foreign.tar",
            signed_by(&other, &m, &root),
            "none of the 1 keys in",
        ),
    ] {
        let f = t.file(name, &b);
        let e = update(&Source::File(f.clone()), &U, &t.paths)
            .expect_err(name)
            .to_string();
        assert!(e.contains(want) && e.contains("nothing was written"), "{e}");
        assert_eq!(t.entry_names(), ["sluice-a.conf"], "{name}");
        assert!(
            t.part("b").iter().all(|&x| x == 0),
            "{name}: slot b untouched"
        );
        let lab = Update {
            allow_unsigned: true,
            ..U
        };
        let said = update(&Source::File(f.clone()), &lab, &t.paths).expect(name);
        assert!(said.contains("NOT VERIFIED"), "{said}");
        let _ = fs::remove_file(slots::entries_dir(&t.paths.esp).join("sluice-b+3.conf"));
        fs::write(
            t.paths.partitions.join("sluice-root-b"),
            vec![0u8; 64 << 10],
        )
        .unwrap();
    }
    // An image that trusts no key refuses a signed bundle too.
    fs::remove_file(t.paths.keys.join("test.pub")).unwrap();
    let f = t.file("signed.tar", &t.signed(&root));
    let e = update(&Source::File(f), &U, &t.paths)
        .expect_err("no keys")
        .to_string();
    assert!(e.contains("holds no key"), "{e}");
}

#[test]
fn a_manifest_changed_after_signing_is_refused_even_in_a_lab() {
    let t = Tree::new("forged", "a");
    let root = ext4(8192);
    let evil = {
        let mut r = ext4(8192);
        r[4000] = 0x66;
        r
    };
    let good = manifest_for(b"kernel", b"initrd", &root);
    let forged = manifest_for(b"kernel", b"initrd", &evil);
    let sig = sign(&t.key, good.as_bytes());
    let b = tar(&[
        (bundle::MANIFEST, forged.as_bytes()),
        (bundle::SIGNATURE, sig.as_bytes()),
        ("vmlinuz", b"kernel"),
        ("initrd", b"initrd"),
        ("root.img", &evil),
    ]);
    let f = t.file("forged.tar", &b);
    for allow_unsigned in [false, true] {
        let u = Update {
            allow_unsigned,
            ..U
        };
        let e = update(&Source::File(f.clone()), &u, &t.paths)
            .expect_err("forged")
            .to_string();
        assert!(e.contains("signature by test.pub does not match"), "{e}");
    }
    assert!(t.part("b").iter().all(|&x| x == 0), "slot b untouched");
    assert_eq!(t.entry_names(), ["sluice-a.conf"]);
}

#[test]
fn a_manifest_in_upper_case_hex_installs() {
    let t = Tree::new("upper", "a");
    let root = ext4(8192);
    let m =
        manifest_for(b"kernel", b"initrd", &root).replace(&sha(&root), &sha(&root).to_uppercase());
    let f = t.file("upper.tar", &signed_by(&t.key, &m, &root));
    let said = update(&Source::File(f), &U, &t.paths).expect("upper-case sums match");
    assert!(said.starts_with("slot b: Sluice 0.2.0 written"), "{said}");
}

/// A tar whose `name` member holds `data` but whose manifest says `declared` is its size
/// (and gives the sha256 of `data`'s first `declared` bytes).
fn longer_than_declared(t: &Tree, name: &str, data: &[u8], declared: usize) -> Vec<u8> {
    let pick = |n: &str, full: &'static [u8]| -> Vec<u8> {
        if n == name {
            data[..declared].to_vec()
        } else {
            full.to_vec()
        }
    };
    let root = ext4(8192);
    let (k, i) = (pick("vmlinuz", b"kernel"), pick("initrd", b"initrd"));
    let r = if name == "root.img" {
        data[..declared].to_vec()
    } else {
        root.clone()
    };
    let m = manifest_for(&k, &i, &r);
    let sig = sign(&t.key, m.as_bytes());
    let member = |n: &str, declared_bytes: Vec<u8>| {
        if n == name {
            data.to_vec()
        } else {
            declared_bytes
        }
    };
    tar(&[
        (bundle::MANIFEST, m.as_bytes()),
        (bundle::SIGNATURE, sig.as_bytes()),
        ("vmlinuz", &member("vmlinuz", k)),
        ("initrd", &member("initrd", i)),
        ("root.img", &member("root.img", r)),
    ])
}

#[test]
fn a_member_longer_than_its_manifest_says_is_refused_before_a_byte_of_it_is_written() {
    let t = Tree::new("long", "a");
    // The kernel member runs on far past its declared 6 bytes.
    let kernel: Vec<u8> = b"kernel".iter().copied().chain([0x41u8; 40000]).collect();
    let f = t.file(
        "long-kernel.tar",
        &longer_than_declared(&t, "vmlinuz", &kernel, 6),
    );
    let e = update(&Source::File(f), &U, &t.paths)
        .expect_err("long kernel")
        .to_string();
    assert!(
        e.contains("vmlinuz: the archive holds 40006 bytes, the manifest says 6"),
        "{e}"
    );
    assert_eq!(
        t.esp_files(),
        Vec::<String>::new(),
        "no temporary file left"
    );
    // root.img runs past its declared size into what the partition would not hold.
    let root = ext4(60 << 10);
    let f = t.file(
        "long-root.tar",
        &longer_than_declared(&t, "root.img", &root, 8192),
    );
    let e = update(&Source::File(f), &U, &t.paths)
        .expect_err("long root")
        .to_string();
    assert!(e.contains("root.img: the archive holds 61440 bytes"), "{e}");
    assert!(t.part("b").iter().all(|&x| x == 0), "slot b untouched");
    assert_eq!(t.entry_names(), ["sluice-a.conf"]);
}

#[test]
fn a_failed_update_leaves_no_temporary_file_on_the_esp() {
    let t = Tree::new("tmp", "a");
    // The initrd does not match its sum: the kernel was already written under its
    // temporary name.
    let root = ext4(8192);
    let m = manifest_for(b"kernel", b"INITRD", &root);
    let sig = sign(&t.key, m.as_bytes());
    let b = tar(&[
        (bundle::MANIFEST, m.as_bytes()),
        (bundle::SIGNATURE, sig.as_bytes()),
        ("vmlinuz", b"kernel"),
        ("initrd", b"initrd"),
        ("root.img", &root),
    ]);
    let f = t.file("initrd.tar", &b);
    let e = update(&Source::File(f), &U, &t.paths)
        .expect_err("initrd")
        .to_string();
    assert!(e.contains("initrd: sha256"), "{e}");
    assert_eq!(t.esp_files(), Vec::<String>::new());
}

#[test]
fn a_bundle_is_read_once_so_what_is_summed_is_what_is_written() {
    // A FIFO gives one bundle to the first reader and another to a second one: a check
    // that opened the source twice would install the second.
    let t = Tree::new("fifo", "a");
    let good = t.signed(&ext4(8192));
    let mut evil_root = ext4(8192);
    evil_root[5000] = 0xee;
    let evil = t.signed(&evil_root);
    let fifo = t.root.join("bundle.fifo");
    nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let writer = {
        let (fifo, good, evil) = (fifo.clone(), good.clone(), evil.clone());
        std::thread::spawn(move || {
            let mut w = OpenOptions::new().write(true).open(&fifo).unwrap();
            let _ = w.write_all(&good);
            drop(w);
            // Until the first reader is gone (no reader: ENXIO), so the second bundle goes
            // to a second open only.
            use std::os::unix::fs::OpenOptionsExt;
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
            while std::time::Instant::now() < deadline {
                let probe = OpenOptions::new()
                    .write(true)
                    .custom_flags(libc::O_NONBLOCK)
                    .open(&fifo);
                match probe {
                    Err(e) if e.raw_os_error() == Some(libc::ENXIO) => break,
                    _ => std::thread::sleep(std::time::Duration::from_millis(20)),
                }
            }
            let mut w = OpenOptions::new().write(true).open(&fifo).unwrap();
            let _ = w.write_all(&evil);
        })
    };
    let u = Update {
        sha256: Some(sha(&good)),
        ..U
    };
    let said = update(&Source::File(fifo.clone()), &u, &t.paths).expect("the FIFO's bundle");
    assert!(said.contains("written"), "{said}");
    assert_eq!(t.part("b")[5000], 0, "the bundle summed is the one written");
    // Let the writer's second open through.
    let mut r = File::open(&fifo).unwrap();
    std::io::copy(&mut r, &mut std::io::sink()).unwrap();
    writer.join().unwrap();
}

/// Runs `cmd`, failing the test with its output when it fails or is missing.
fn run(cmd: &mut std::process::Command) {
    let out = cmd.output().unwrap_or_else(|e| {
        panic!("{cmd:?}: {e} (scripts/setup.sh installs minisign and python3)")
    });
    assert!(
        out.status.success(),
        "{cmd:?}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_bundle_from_image_bundle_py_signed_by_minisign_installs_and_an_unsigned_one_does_not() {
    // What image/build.sh does: a key from `minisign -G -W`, its public half in the image's
    // keys, bundle.py signing with the secret half.
    let t = Tree::new("bundlepy", "a");
    let key = t.root.join("build.key");
    run(std::process::Command::new("minisign")
        .args(["-G", "-W", "-p"])
        .arg(t.paths.keys.join("build.pub"))
        .arg("-s")
        .arg(&key));
    let (k, i, r) = (
        t.file("vmlinuz", b"kernel"),
        t.file("initrd", b"initrd"),
        t.file("root.img", &ext4(8192)),
    );
    let py = concat!(env!("CARGO_MANIFEST_DIR"), "/../image/bundle.py");
    let bundle = |out: &Path, key: Option<&Path>| {
        let mut c = std::process::Command::new("python3");
        c.arg(py)
            .arg(out)
            .args(["--version", "0.3.0", "--cmdline", "console=ttyS0 rw"])
            .arg("--vmlinuz")
            .arg(&k)
            .arg("--initrd")
            .arg(&i)
            .arg("--root")
            .arg(&r);
        if let Some(key) = key {
            c.arg("--key").arg(key);
        }
        run(&mut c);
    };
    let signed = t.root.join("signed.tar");
    bundle(&signed, Some(&key));
    let said = update(&Source::File(signed), &U, &t.paths).expect("bundle.py's bundle");
    assert!(
        said.starts_with("slot b: Sluice 0.3.0 written") && said.contains("signed by build.pub"),
        "{said}"
    );
    let _ = fs::remove_file(slots::entries_dir(&t.paths.esp).join("sluice-b+3.conf"));
    let unsigned = t.root.join("unsigned.tar");
    bundle(&unsigned, None);
    let e = update(&Source::File(unsigned), &U, &t.paths)
        .expect_err("unsigned")
        .to_string();
    assert!(e.contains("the bundle is not signed"), "{e}");
}

#[test]
fn update_refuses_while_the_running_slot_is_on_trial_or_unknown() {
    let t = Tree::new("trial", "b");
    let dir = slots::entries_dir(&t.paths.esp);
    fs::write(
        dir.join("sluice-b+2-1.conf"),
        slots::entry(Slot::B, 2, "0.2.0", "rw", 3).1,
    )
    .unwrap();
    let f = t.file("bundle.tar", &t.signed(&ext4(8192)));
    let e = update(&Source::File(f.clone()), &U, &t.paths)
        .expect_err("trial")
        .to_string();
    assert!(e.contains("slot b runs on trial"), "{e}");
    fs::write(&t.paths.cmdline, "root=/dev/vda2 rw").unwrap();
    let e = update(&Source::File(f.clone()), &U, &t.paths)
        .expect_err("no slot")
        .to_string();
    assert!(e.contains("cannot tell the running slot"), "{e}");
}

#[test]
fn status_reports_a_failed_newer_slot_and_the_last_failure() {
    let t = Tree::new("failed", "a");
    let dir = slots::entries_dir(&t.paths.esp);
    fs::write(
        dir.join("sluice-b+0-1.conf"),
        slots::entry(Slot::B, 2, "0.2.0", "rw", 3).1,
    )
    .unwrap();
    fs::write(
        &t.paths.failures,
        "2026-12-02T01:00:00Z slot b: sluice.service exited 1\n",
    )
    .unwrap();
    let s = status(&t.paths).unwrap();
    assert!(s.contains("slot b: Sluice 0.2.0 (install 2) FAILED"), "{s}");
    assert!(
        s.contains("last failed trial boot: 2026-12-02T01:00:00Z slot b: sluice.service exited 1"),
        "{s}"
    );
}

#[test]
fn sources_parse_as_urls_only_with_an_http_scheme() {
    assert_eq!(
        Source::parse("HTTPS://mirror/x.tar"),
        Source::Url("HTTPS://mirror/x.tar".into())
    );
    assert_eq!(
        Source::parse("/dev/disk/by-id/virtio-bundle"),
        Source::File("/dev/disk/by-id/virtio-bundle".into())
    );
    assert_eq!(Source::parse("ftp://x"), Source::File("ftp://x".into()));
}
