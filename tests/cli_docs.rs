//! The command line's own documentation and manners: `sluice man` writes a page for the
//! command and for every subcommand `--help` lists, each naming every long option that
//! subcommand's `--help` shows (they come from the same definitions); `sluice completions`
//! prints scripts the shells accept; a reader that closes the pipe ends a command quietly
//! (`sluice check ... | head`), with no panic on stderr. No root needed.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};

use lab::testing::{TempDir, repo};

fn sluice() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sluice"))
}

fn help(path: &[String]) -> String {
    let out = sluice()
        .args(path)
        .arg("--help")
        .output()
        .expect("run sluice --help");
    assert!(out.status.success(), "{path:?} --help: {out:?}");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The subcommands a `--help` lists under "Commands:" (without `help`).
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|c| *c != "help")
        .map(str::to_string)
        .collect()
}

/// The long options a `--help` lists (without --help and --version).
fn long_options(help: &str) -> Vec<String> {
    help.lines()
        .filter_map(|l| l.trim_start().split_once("--").map(|(_, rest)| rest))
        .filter(|_| true)
        .filter_map(|rest| {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '-')
                .collect();
            (!name.is_empty() && name != "help" && name != "version").then_some(name)
        })
        .collect()
}

/// Every subcommand path under `path`, depth first.
fn walk(path: Vec<String>, out: &mut Vec<Vec<String>>) {
    let h = help(&path);
    for sub in subcommands(&h) {
        let mut p = path.clone();
        p.push(sub);
        walk(p, out);
    }
    out.push(path);
}

#[test]
fn every_subcommand_has_a_man_page_with_every_option() {
    let tmp = TempDir::new("dc-man");
    let out = sluice()
        .args(["man", "--dir"])
        .arg(tmp.dir())
        .output()
        .expect("run sluice man");
    assert!(out.status.success(), "sluice man: {out:?}");
    let mut paths = Vec::new();
    walk(Vec::new(), &mut paths);
    assert!(paths.len() > 20, "ctl, fleet, image... : {paths:?}");
    for p in &paths {
        let name = std::iter::once("sluice".to_string())
            .chain(p.iter().cloned())
            .collect::<Vec<_>>()
            .join("-");
        let page_path = tmp.dir().join(format!("{name}.8"));
        let page = std::fs::read_to_string(&page_path)
            .unwrap_or_else(|e| panic!("{}: {e}", page_path.display()));
        assert!(page.contains(".TH "), "{name}: a roff page: {page}");
        for opt in long_options(&help(p)) {
            let roff = format!("\\-\\-{}", opt.replace('-', "\\-"));
            assert!(page.contains(&roff), "{name}.8 lacks --{opt}:\n{page}");
        }
    }
    let pages = std::fs::read_dir(tmp.dir()).expect("dir").count();
    assert_eq!(
        pages,
        paths.len() + 1,
        "one page per command and sluice.toml(5), no stale ones"
    );
    // sluice.toml(5) renders as man renders it, with every key of the reference.
    let page = tmp.dir().join("sluice.toml.5");
    let out = Command::new("man")
        .args(["-l", "-P", "cat"])
        .arg(&page)
        .env("MANWIDTH", "100")
        .output()
        .expect("man (scripts/setup.sh installs man-db)");
    assert!(out.status.success(), "man -l sluice.toml.5: {out:?}");
    let text = String::from_utf8_lossy(&out.stdout);
    let keys = config::keys::reference();
    assert!(keys.len() > 150, "{}", keys.len());
    for k in keys {
        assert!(
            text.lines().any(|l| {
                let l = l.trim();
                l == k.path || l.starts_with(&format!("{} ", k.path))
            }),
            "sluice.toml(5) as man shows it lacks {}",
            k.path
        );
    }
}

fn shell_accepts(shell: &str, check: &[&str], script: &Path) {
    let out = Command::new(shell)
        .args(check)
        .arg(script)
        .output()
        .unwrap_or_else(|e| panic!("{shell} is missing ({e}): scripts/setup.sh installs it"));
    assert!(
        out.status.success(),
        "{shell} refuses the completion script: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn completions_are_scripts_the_shells_accept() {
    let tmp = TempDir::new("dc-compl");
    for (shell, check) in [
        ("bash", &["-n"][..]),
        ("zsh", &["-n"][..]),
        ("fish", &["--no-execute"][..]),
    ] {
        let out = sluice()
            .args(["completions", shell])
            .output()
            .expect("run sluice completions");
        assert!(out.status.success(), "{shell}: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        for word in ["ctl", "drain", "fleet", "completions"] {
            assert!(text.contains(word), "{shell} completes {word}");
        }
        let script = tmp.dir().join(format!("sluice.{shell}"));
        std::fs::write(&script, text.as_bytes()).expect("write");
        shell_accepts(shell, check, &script);
    }
}

#[test]
fn a_closed_pipe_ends_a_command_quietly() {
    let (reader, writer) = std::io::pipe().expect("pipe");
    // The reader is gone before the command writes: every write meets a closed pipe, as
    // `sluice check ... | head -0` would.
    drop(reader);
    let out = sluice()
        .args(["check", "--config"])
        .arg(repo().join("examples/sluice.toml"))
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .expect("run sluice check");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.is_empty(), "nothing on stderr: {stderr}");
    assert_eq!(
        out.status.signal(),
        Some(13),
        "ended by SIGPIPE as cat would be: {:?}",
        out.status
    );
}

/// The README's quick start is a file `sluice check` accepts, shown as it is, and every
/// relative link of the README and the manual leads to a file of the repository.
#[test]
fn the_quick_start_validates_and_the_links_resolve() {
    let root = repo();
    let file = root.join("examples/quickstart/web.toml");
    let out = sluice()
        .args(["check", "--config"])
        .arg(&file)
        .output()
        .expect("run sluice check");
    assert!(out.status.success(), "{out:?}");
    let readme = std::fs::read_to_string(root.join("README.md")).expect("README");
    let text = std::fs::read_to_string(&file).expect("quick start");
    let shown = text.split_once("\n\n").map_or("", |(_, rest)| rest);
    assert!(
        readme.contains(shown),
        "README.md shows examples/quickstart/web.toml as it is"
    );
    let mut pages = vec![root.join("README.md")];
    for e in std::fs::read_dir(root.join("docs/manual")).expect("docs/manual") {
        pages.push(e.expect("entry").path());
    }
    for page in pages {
        let text = std::fs::read_to_string(&page).expect("page");
        let dir = page.parent().expect("a directory");
        for (_, rest) in text.match_indices("](").map(|(i, _)| text.split_at(i + 2)) {
            let target = rest.split(')').next().unwrap_or_default();
            if target.contains("://") || target.starts_with('#') {
                continue;
            }
            let path = target.split('#').next().unwrap_or_default();
            assert!(
                dir.join(path).exists(),
                "{}: the link {target} leads nowhere",
                page.display()
            );
        }
    }
}

/// `--json` where it means nothing is refused on the command line (status 2), not ignored:
/// the metrics exposition is Prometheus text.
#[test]
fn json_where_it_means_nothing_is_refused() {
    for args in [
        &["ctl", "--json", "metrics"][..],
        &["ctl", "metrics", "--json"][..],
    ] {
        let out = sluice().args(args).output().expect("run sluice ctl");
        assert_eq!(out.status.code(), Some(2), "{args:?}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("--json does not apply"), "{args:?}: {err}");
    }
}
