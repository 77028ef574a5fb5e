//! `sluice run` refuses clearly what it cannot do: a missing interface, a bad config, and
//! no privileges, each with a one-line reason and a non-zero exit, nothing left attached.

use std::process::Command;

use lab::testing::TempDir;

fn write_config(dir: &std::path::Path, interfaces: &str) -> std::path::PathBuf {
    let path = dir.join("sluice.toml");
    std::fs::write(
        &path,
        format!(
            "[appliance]\nname = \"t\"\ninterfaces = [{interfaces}]\n\n[api]\nsocket = \"{}\"\nmetrics = \"\"\n\n\
             [[vip]]\nname = \"web\"\naddress = \"192.0.2.10\"\nport = 80\n\
             [[vip.backend]]\naddress = \"10.0.0.21\"\n",
            dir.join("api.sock").display()
        ),
    )
    .expect("write config");
    path
}

#[test]
fn missing_interface_is_named() {
    lab::netns::require_root();
    let ns = lab::netns::Netns::new("rerr");
    let dir = TempDir::new("sluice-noif");
    let cfg = write_config(dir.dir(), "\"nosuch0\"");
    let out = lab::sluice!()
        .inside(&ns)
        .run(&["run", "--config", &cfg.to_string_lossy()]);
    assert!(!out.ok(), "must fail: {}", out.stderr);
    let stderr = out.stderr;
    assert!(
        stderr.contains("interface nosuch0 does not exist"),
        "names the interface: {stderr}"
    );
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn invalid_config_is_refused_before_touching_anything() {
    let dir = TempDir::new("sluice-badcfg");
    let cfg = write_config(dir.dir(), "");
    let out = lab::sluice!().run(&["run", "--config", &cfg.to_string_lossy()]);
    assert!(!out.ok(), "must fail: {}", out.stderr);
    let stderr = out.stderr;
    assert!(
        stderr.contains("appliance.interfaces"),
        "names the key: {stderr}"
    );
}

#[test]
fn not_root_is_said_plainly() {
    lab::netns::require_root();
    lab::netns::require_program("setpriv", "util-linux");
    let tmp = TempDir::new("sluice-noroot");
    let dir = tmp.dir();
    let cfg = write_config(dir, "\"lo\"");
    // nobody (65534) cannot attach XDP or open AF_XDP sockets.
    std::fs::set_permissions(dir, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    std::fs::set_permissions(&cfg, std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .expect("chmod");
    // A copy the unprivileged user can reach whatever the checkout's permissions are.
    let bin = dir.join("sluice");
    std::fs::copy(lab::sluice!().path(), &bin).expect("copy binary");
    std::fs::set_permissions(&bin, std::os::unix::fs::PermissionsExt::from_mode(0o755))
        .expect("chmod");
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(&bin)
        .args(["run", "--config"])
        .arg(&cfg)
        .output()
        .expect("run setpriv");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "must fail: {stderr}");
    assert!(stderr.contains("needs root"), "says why: {stderr}");
}
