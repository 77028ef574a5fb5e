//! `sluice check` as an operator runs it: exit codes and one-line reasons, never a panic.

use lab::testing::{Said, TempDir, repo};

/// `sluice check --config PATH`.
fn check(path: &std::path::Path) -> Said {
    lab::sluice!().run(&["check", "--config", &path.to_string_lossy()])
}

/// Asserts a failure with exactly one line on stderr containing `needle`, and no panic.
#[track_caller]
fn assert_one_line_failure(path: &std::path::Path, needle: &str) {
    let Said {
        code,
        stdout,
        stderr,
    } = check(path);
    assert_ne!(code, 0, "must fail: {stdout}{stderr}");
    assert!(!stderr.contains("panicked"), "panic: {stderr}");
    assert!(!stderr.contains("backtrace"), "backtrace: {stderr}");
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 1, "one line expected, got: {stderr:?}");
    assert!(
        lines[0].contains(needle),
        "{needle:?} not in {:?}",
        lines[0]
    );
}

#[test]
fn example_config_passes_with_summary() {
    let Said {
        code,
        stdout,
        stderr,
    } = check(&repo().join("examples/sluice.toml"));
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.contains("4 vip(s), 9 backend(s), 2 health check(s), 2 bgp peer(s)"),
        "{stdout}"
    );
    assert!(stdout.contains("vip web "), "{stdout}");
    assert!(
        stdout.contains("192.0.2.53:53/udp tunnel/vxlan"),
        "{stdout}"
    );
}

#[test]
fn missing_file() {
    assert_one_line_failure(
        &repo().join("examples/invalid/no-such-file.toml"),
        "not found",
    );
}

#[test]
fn empty_file() {
    assert_one_line_failure(&repo().join("examples/invalid/empty.toml"), "empty");
}

#[test]
fn not_toml() {
    assert_one_line_failure(
        &repo().join("examples/invalid/not-toml.toml"),
        "not valid TOML: line 1, column",
    );
}

#[test]
fn unknown_key() {
    let Said { code, stderr, .. } = check(&repo().join("examples/invalid/unknown-key.toml"));
    assert_ne!(code, 0);
    // A header naming the file and count, then the error itself on one line.
    let lines: Vec<&str> = stderr.lines().collect();
    assert_eq!(lines.len(), 2, "{stderr:?}");
    assert!(lines[0].ends_with("1 error"), "{stderr:?}");
    assert_eq!(lines[1].trim(), "appliance.colour: unknown key");
}

#[test]
fn every_error_of_a_file_is_listed() {
    let Said { code, stderr, .. } = check(&repo().join("examples/invalid/many-errors.toml"));
    assert_ne!(code, 0);
    assert!(
        stderr.lines().next().unwrap_or("").ends_with("6 errors"),
        "{stderr}"
    );
    for needle in [
        "appliance.name:",
        "appliance.interfaces:",
        "vip \"web\".scheduler:",
        "vip \"web\".health_check:",
        "vip \"web\".snat:",
        "vip \"web\".backend[0].weight: 70000 is out of range",
    ] {
        assert!(
            stderr.contains(needle),
            "{needle:?} missing from:\n{stderr}"
        );
    }
}

#[test]
fn help_and_version() {
    let help = lab::sluice!().run(&["--help"]);
    assert!(help.ok());
    assert!(help.stdout.contains("check"));
    let version = lab::sluice!().run(&["--version"]);
    assert!(version.ok());
    assert!(version.stdout.starts_with("sluice "));
}

/// Two tenants' VIPs on one address: each summary line names its VNI (the address alone
/// would not tell them apart); the underlay's lines are as ever.
#[test]
fn tenant_vips_show_their_vni() {
    let dir = TempDir::new("sluice-check-tenant");
    let path = dir.dir().join("sluice.toml");
    let mut text = String::from(
        "[appliance]\nname = \"lb1\"\ninterfaces = [\"eth0\"]\n\n\
         [[vip]]\nname = \"web\"\naddress = \"192.0.2.10\"\nport = 80\n\
         backend = [{ address = \"10.1.0.1\" }]\n",
    );
    for (vni, vtep) in [(100, "192.0.2.101"), (200, "192.0.2.102")] {
        text.push_str(&format!(
            "\n[[vip]]\nname = \"t{vni}\"\naddress = \"10.0.0.5\"\nport = 80\n\
             tenant_vni = {vni}\nmode = \"tunnel\"\ntunnel = \"vxlan\"\n\
             backend = [{{ address = \"172.16.0.11\", vtep = \"{vtep}\" }}]\n"
        ));
    }
    std::fs::write(&path, text).expect("write");
    let Said {
        code,
        stdout,
        stderr,
    } = check(&path);
    drop(dir);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("3 vip(s), 3 backend(s)"), "{stdout}");
    for want in [
        "  vip web          192.0.2.10:80/tcp nat ",
        "  vip t100         10.0.0.5:80/tcp vni 100 tunnel/vxlan ",
        "  vip t200         10.0.0.5:80/tcp vni 200 tunnel/vxlan ",
    ] {
        assert!(stdout.contains(want), "{want:?} missing from\n{stdout}");
    }
}

/// `sluice check --explain`: a key's entry however it is written, a table's keys, and for a
/// name that is no key, status 1 with the keys of that name elsewhere.
#[test]
fn explain_prints_a_keys_entry_and_names_near_keys_for_a_wrong_one() {
    let sluice = || lab::sluice!();
    let Said {
        code,
        stdout,
        stderr,
    } = sluice().run(&["check", "--explain", r#"vip "web".backend[0].weight"#]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stdout.starts_with("vip.backend.weight\n  type: integer 0..=65535\n  default: 100\n"),
        "{stdout}"
    );
    let Said { code, stdout, .. } = sluice().run(&["check", "--explain", "vip.backend"]);
    assert_eq!(code, 0);
    assert!(stdout.contains("Keys of vip.backend:"), "{stdout}");
    assert!(stdout.contains("  vip.backend.weight "), "{stdout}");
    let Said {
        code,
        stdout,
        stderr,
    } = sluice().run(&["check", "--explain", "weight"]);
    assert_eq!(code, 1, "{stdout}");
    assert!(stderr.contains("no key \"weight\""), "{stderr}");
    assert!(stderr.contains("  vip.backend.weight"), "{stderr}");
}
