//! `update` and `status` on a scratch tree: an ESP directory, partitions as files, a
//! kernel command line.

use super::bundle::tests::{manifest_for, sha, tar};
use super::*;

struct Tree {
    root: PathBuf,
    paths: Paths,
}

impl Tree {
    fn new(tag: &str, slot: &str) -> Tree {
        let root = std::env::temp_dir().join(format!("sluice-image-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let paths = Paths {
            esp: root.join("esp"),
            partitions: root.join("dev"),
            cmdline: root.join("cmdline"),
            failures: root.join("slot-failures.log"),
        };
        fs::create_dir_all(slots::entries_dir(&paths.esp)).unwrap();
        fs::create_dir_all(&paths.partitions).unwrap();
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
        Tree { root, paths }
    }

    fn file(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.root.join(name);
        fs::write(&p, bytes).unwrap();
        p
    }

    fn entry_names(&self) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(slots::entries_dir(&self.paths.esp))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

impl Drop for Tree {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

fn ext4(len: usize) -> Vec<u8> {
    let mut r = vec![0u8; len];
    r[1080] = 0x53;
    r[1081] = 0xef;
    r[3000] = 7;
    r
}

fn bundle(root: &[u8]) -> Vec<u8> {
    let m = manifest_for(b"kernel", b"initrd", root);
    tar(&[
        (bundle::MANIFEST, m.as_bytes()),
        ("vmlinuz", b"kernel"),
        ("initrd", b"initrd"),
        ("root.img", root),
    ])
}

const U: Update = Update {
    sha256: None,
    tries: 3,
};

#[test]
fn update_writes_the_other_slot_and_gives_it_a_counted_entry() {
    let t = Tree::new("ok", "a");
    let root = ext4(8192);
    let b = bundle(&root);
    let f = t.file("bundle.tar", &b);
    let u = Update {
        sha256: Some(sha(&b)),
        tries: 3,
    };
    let said = update(&Source::File(f.clone()), &u, &t.paths).unwrap();
    assert!(said.starts_with("slot b: Sluice 0.2.0 written"), "{said}");
    assert_eq!(t.entry_names(), ["sluice-a.conf", "sluice-b+3.conf"]);
    let part = fs::read(t.paths.partitions.join("sluice-root-b")).unwrap();
    assert_eq!(&part[..root.len()], &root[..]);
    assert_eq!(part.len(), 64 << 10, "the partition keeps its size");
    assert_eq!(
        fs::read(t.paths.esp.join("sluice/b/vmlinuz")).unwrap(),
        b"kernel"
    );
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
    let mut b = bundle(&ext4(8192));
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

    let f = t.file("sum.tar", &bundle(&ext4(8192)));
    let u = Update {
        sha256: Some("00".repeat(32)),
        tries: 3,
    };
    let e = update(&Source::File(f.clone()), &u, &t.paths)
        .expect_err("sum")
        .to_string();
    assert!(e.contains("nothing was written"), "{e}");

    let f = t.file("notext4.tar", &bundle(&[1u8; 4096]));
    let e = update(&Source::File(f.clone()), &U, &t.paths)
        .expect_err("not ext4")
        .to_string();
    assert!(e.contains("not an ext4 filesystem"), "{e}");

    let f = t.file("big.tar", &bundle(&ext4(128 << 10)));
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
    let f = t.file("bundle.tar", &bundle(&ext4(8192)));
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

/// Serves `body` once per connection with `status` on a loopback port, for `n` requests;
/// returns the URL. `cut` closes the connection after that many body bytes (a download that
/// breaks off), with the full Content-Length announced.
fn serve(status: &str, body: Vec<u8>, cut: Option<usize>, n: usize) -> String {
    use std::io::{BufRead, BufReader};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/sluice-update.tar", l.local_addr().unwrap());
    let status = status.to_string();
    std::thread::spawn(move || {
        for conn in l.incoming().take(n) {
            let mut c = conn.unwrap();
            let mut line = String::new();
            let mut r = BufReader::new(c.try_clone().unwrap());
            while r.read_line(&mut line).unwrap() > 2 {
                line.clear();
            }
            let head = format!(
                "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = c.write_all(head.as_bytes());
            let _ = c.write_all(&body[..cut.unwrap_or(body.len())]);
        }
    });
    url
}

#[test]
fn update_from_a_url_streams_into_the_slot_and_checks_the_whole_sum() {
    let t = Tree::new("url", "a");
    let root = ext4(8192);
    let b = bundle(&root);
    let u = Update {
        sha256: Some(sha(&b)),
        tries: 2,
    };
    let url = serve("200 OK", b.clone(), None, 1);
    let said = update(&Source::parse(&url), &u, &t.paths).unwrap();
    assert!(said.contains(&format!("written from {url}")), "{said}");
    assert_eq!(t.entry_names(), ["sluice-a.conf", "sluice-b+2.conf"]);
    let part = fs::read(t.paths.partitions.join("sluice-root-b")).unwrap();
    assert_eq!(&part[..root.len()], &root[..]);

    // The right members under a sum that is not the published one: no entry.
    let t = Tree::new("urlsum", "a");
    let wrong = Update {
        sha256: Some("11".repeat(32)),
        tries: 2,
    };
    let e = update(
        &Source::parse(&serve("200 OK", b.clone(), None, 1)),
        &wrong,
        &t.paths,
    )
    .expect_err("sum")
    .to_string();
    assert!(
        e.contains("downloaded bundle's sha256") && e.contains("slot b"),
        "{e}"
    );
    assert_eq!(t.entry_names(), ["sluice-a.conf"]);
}

#[test]
fn a_failed_or_broken_off_download_writes_no_entry() {
    let t = Tree::new("url404", "a");
    let b = bundle(&ext4(8192));
    let e = update(
        &Source::parse(&serve("404 Not Found", b"no".to_vec(), None, 1)),
        &U,
        &t.paths,
    )
    .expect_err("404")
    .to_string();
    assert!(e.contains("cannot download") && e.contains("404"), "{e}");
    let cut = b.len() - 3000;
    let e = update(
        &Source::parse(&serve("200 OK", b, Some(cut), 1)),
        &U,
        &t.paths,
    )
    .expect_err("cut")
    .to_string();
    assert!(e.contains("reading the bundle"), "{e}");
    assert_eq!(t.entry_names(), ["sluice-a.conf"]);
    // Nothing listens there any more.
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let gone = format!("http://{}/b.tar", l.local_addr().unwrap());
    drop(l);
    let e = update(&Source::parse(&gone), &U, &t.paths)
        .expect_err("refused")
        .to_string();
    assert!(
        e.contains("cannot download") && e.contains("untouched"),
        "{e}"
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
