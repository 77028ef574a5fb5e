//! `sluice import keepalived` as an operator runs it: each example keepalived.conf imported
//! with `-o`, the unmapped lines on stderr, the placeholders refused by `sluice check` by
//! name, then filled in the way an operator would and the file accepted by `sluice check`.
//! Bad input fails with its line number and no panic.

use lab::testing::{Said, TempDir, repo};

/// Every placeholder replaced as the operator of a lab appliance would.
fn fill(toml: &str) -> String {
    toml.lines()
        .map(|l| {
            let Some((key, value)) = l.split_once(" = ") else {
                return l.to_string();
            };
            if !value.contains("<fill in: ") {
                return l.to_string();
            }
            let v = match key {
                "name" => "\"lb1\"",
                "interfaces" => "[\"eth0\"]",
                "asn" if value.contains("appliance") => "65010",
                "asn" => "65000",
                "router_id" => "\"10.0.0.10\"",
                "address" => "\"10.0.0.1\"",
                other => panic!("unexpected placeholder key {other}: {l}"),
            };
            format!("{key} = {v}")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// (example, VIPs it must yield, lines its stderr must name).
const EXAMPLES: [(&str, usize, &[usize]); 3] = [
    ("nat-http", 2, &[4, 14, 35, 45, 70, 93]),
    ("dr-persistence", 3, &[4, 15, 37, 71, 87]),
    ("tun-checks", 2, &[9, 14, 44, 54, 62]),
];

#[test]
fn examples_import_and_pass_check_once_filled_in() {
    let dir = TempDir::new("ia-import");
    let tmp = |name: &str| dir.dir().join(name);
    for (name, vips, lines) in EXAMPLES {
        let conf = repo().join(format!("examples/keepalived/{name}.conf"));
        let out = tmp(&format!("{name}.toml"));
        let Said {
            code,
            stdout,
            stderr,
        } = lab::sluice!().run(&[
            "import",
            "keepalived",
            conf.to_str().expect("path"),
            "-o",
            out.to_str().expect("path"),
        ]);
        assert_eq!(code, 0, "{name}: {stderr}");
        assert!(
            stdout.is_empty(),
            "{name}: -o writes nothing to stdout: {stdout}"
        );
        for line in lines {
            assert!(
                stderr.contains(&format!("{name}.conf: line {line}: ")),
                "{name}: stderr names no line {line}:\n{stderr}"
            );
        }
        assert!(stderr.contains(&format!("wrote {vips} vip(s)")), "{stderr}");
        let text = std::fs::read_to_string(&out).expect("output written");

        // As written, `sluice check` refuses it and says what to fill in, key by key.
        let Said {
            code,
            stderr: errors,
            ..
        } = lab::sluice!().run(&["check", "--config", out.to_str().expect("path")]);
        assert_eq!(code, 1, "{name}: placeholders must be refused");
        for key in [
            "appliance.name",
            "appliance.interfaces[0]",
            "bgp.asn",
            "bgp.router_id",
        ] {
            assert!(
                errors.contains(&format!(
                    "{key}: placeholder left by `sluice import`: fill in"
                )),
                "{name}: {key} not named:\n{errors}"
            );
        }
        assert!(
            errors.lines().skip(1).all(|l| l.contains("placeholder")),
            "{name}: only placeholders may be wrong:\n{errors}"
        );

        let filled = tmp(&format!("{name}-filled.toml"));
        std::fs::write(&filled, fill(&text)).expect("write");
        let Said {
            code,
            stdout: summary,
            stderr: errors,
        } = lab::sluice!().run(&["check", "--config", filled.to_str().expect("path")]);
        assert_eq!(code, 0, "{name}: filled-in import refused:\n{errors}");
        assert!(
            summary.contains(&format!("{vips} vip(s)")),
            "{name}: {summary}"
        );
    }
}

#[track_caller]
fn assert_refused(bytes: &[u8], needle: &str) {
    let dir = TempDir::new("ia-import");
    let path = dir.dir().join(format!("bad-{}.conf", needle.len()));
    std::fs::write(&path, bytes).expect("write");
    let Said {
        code,
        stdout,
        stderr,
    } = lab::sluice!().run(&["import", "keepalived", path.to_str().expect("path")]);
    drop(dir);
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(stdout.is_empty(), "nothing written on failure: {stdout}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.contains(needle), "{needle:?} not in {stderr:?}");
}

#[test]
fn bad_input_fails_with_its_line() {
    assert_refused(
        b"virtual_server 192.0.2.1 80 {\n  real_server 10.0.0.1 80 {\n}\n",
        "line 1: the block of \"virtual_server 192.0.2.1 80\" opened here is never closed",
    );
    assert_refused(b"global_defs {\n}\n}\n", "line 3: '}' closes no block");
    assert_refused(
        b"virtual_server 192.0.2.1 80 {\n  lb_algoo rr\n}\n",
        "line 2: \"lb_algoo\" is not a keepalived keyword inside virtual_server",
    );
    assert_refused(
        b"\x7fELF\x02\x01\x01\0\0\0",
        "line 1: byte 0x7f is not text",
    );
    let Said { code, stderr, .. } =
        lab::sluice!().run(&["import", "keepalived", "/nonexistent/keepalived.conf"]);
    assert_eq!(code, 1);
    assert!(stderr.contains("/nonexistent/keepalived.conf"), "{stderr}");
}
