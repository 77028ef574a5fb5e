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

/// Every file under `dir` (recursively).
fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).expect("a directory").flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// The `id`s of an HTML page's elements (the anchors a link may name).
fn ids(html: &str) -> Vec<&str> {
    html.match_indices(" id=\"")
        .filter_map(|(i, m)| html[i + m.len()..].split('"').next())
        .collect()
}

/// The manual builds as a book (`mdbook build docs`), every chapter is in it, and no link of
/// the book leads nowhere: every relative `href` and `src` names a file of the book, and
/// every `#anchor` an element of its page.
#[test]
fn the_manual_builds_as_a_book_without_a_broken_link() {
    let root = repo();
    let tmp = TempDir::new("dc-book");
    let out = Command::new("mdbook")
        .arg("build")
        .arg(root.join("docs"))
        .arg("--dest-dir")
        .arg(tmp.dir())
        .output()
        .unwrap_or_else(|e| panic!("mdbook is missing ({e}): scripts/setup.sh installs it"));
    assert!(out.status.success(), "mdbook build docs: {out:?}");
    let summary = std::fs::read_to_string(root.join("docs/SUMMARY.md")).expect("SUMMARY.md");
    for e in std::fs::read_dir(root.join("docs/manual")).expect("docs/manual") {
        let name = e.expect("entry").file_name().to_string_lossy().to_string();
        assert!(
            summary.contains(&format!("(manual/{name})")),
            "docs/SUMMARY.md leaves out the chapter {name}"
        );
        let html = tmp.dir().join("manual").join(name.replace(".md", ".html"));
        assert!(html.exists(), "{} was not built", html.display());
    }
    let mut broken = Vec::new();
    let pages = files_under(tmp.dir());
    let html: Vec<_> = pages
        .iter()
        .filter(|p| p.extension().is_some_and(|x| x == "html"))
        .collect();
    assert!(html.len() > 8, "{html:?}");
    for page in html {
        let text = std::fs::read_to_string(page).expect("page");
        for attr in [" href=\"", " src=\""] {
            for (i, m) in text.match_indices(attr) {
                let link = text[i + m.len()..].split('"').next().unwrap_or_default();
                let external = link.contains("://") || link.starts_with("mailto:");
                if external || link.starts_with("javascript:") || link.is_empty() {
                    continue;
                }
                let (path, anchor) = link.split_once('#').unwrap_or((link, ""));
                let path = path.split('?').next().unwrap_or_default();
                let target = if path.is_empty() {
                    page.clone()
                } else {
                    page.parent().expect("a directory").join(path)
                };
                if !target.exists() {
                    broken.push(format!("{}: {link}", page.display()));
                    continue;
                }
                let is_page = target.extension().is_some_and(|x| x == "html");
                if !anchor.is_empty() && is_page {
                    let body = std::fs::read_to_string(&target).expect("target page");
                    if !ids(&body).contains(&anchor) {
                        broken.push(format!("{}: {link} (no such anchor)", page.display()));
                    }
                }
            }
        }
    }
    assert!(broken.is_empty(), "broken links in the book: {broken:#?}");
}

/// Every TOML example of the manual and the README is something `sluice check` accepts: a
/// whole file as it is, a fragment inside a minimal file (an `[appliance]` section when it
/// has none, and one VIP when it shows none).
#[test]
fn every_toml_example_of_the_manual_is_accepted_by_sluice_check() {
    let root = repo();
    let tmp = TempDir::new("dc-examples");
    let mut pages = vec![root.join("README.md"), root.join("docs/intro.md")];
    pages.extend(files_under(&root.join("docs/manual")));
    let mut seen = 0;
    let mut refused = Vec::new();
    for page in pages {
        let text = std::fs::read_to_string(&page).expect("page");
        for (n, block) in text.split("```toml\n").skip(1).enumerate() {
            let example = block.split("```").next().unwrap_or_default();
            let mut file = String::new();
            if !example.contains("[appliance]") {
                file += "[appliance]\nname = \"doc\"\ninterfaces = [\"eth0\"]\n\n";
            }
            file += example;
            if !example.contains("[[vip]]") {
                file += "\n[[vip]]\nname = \"doc\"\naddress = \"192.0.2.99\"\nport = 80\n\
                         backend = [{ address = \"10.1.0.99\" }]\n";
            }
            let path = tmp.dir().join(format!("example-{seen}.toml"));
            std::fs::write(&path, &file).expect("write");
            let out = sluice()
                .args(["check", "--config"])
                .arg(&path)
                .output()
                .expect("run sluice check");
            if !out.status.success() {
                refused.push(format!(
                    "{} example {}: {}",
                    page.display(),
                    n + 1,
                    String::from_utf8_lossy(&out.stderr)
                ));
            }
            seen += 1;
        }
    }
    assert!(seen >= 8, "{seen} examples");
    assert!(refused.is_empty(), "{refused:#?}");
}
