//! `sluice man` and `sluice completions`: the manual pages and the shell completions,
//! generated from the clap definitions in `cli.rs` (the parser's own), so a flag added
//! there is in the page and on Tab without anyone writing it twice.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::CommandFactory;

use crate::cli::Cli;

/// The manual section: system administration commands, as keepalived(8) and bird(8).
const SECTION: &str = "8";

/// Writes sluice(8), a page for every subcommand (`sluice-ctl-drain.8`, ...) and
/// sluice.toml(5) into `dir`; returns the files written.
pub fn man(dir: &Path) -> std::io::Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut cmd = Cli::command().disable_help_subcommand(true);
    cmd.build();
    let mut written = Vec::new();
    page(&cmd, dir, &mut written)?;
    // sluice.toml(5): every configuration key, from the reference `sluice check` holds to.
    let toml = dir.join("sluice.toml.5");
    std::fs::write(&toml, config::keys::man_page(env!("CARGO_PKG_VERSION")))?;
    written.push(toml);
    Ok(written)
}

fn page(cmd: &clap::Command, dir: &Path, written: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let man = clap_mangen::Man::new(cmd.clone())
        .section(SECTION)
        .manual("Sluice manual")
        .source(format!("sluice {}", env!("CARGO_PKG_VERSION")));
    let path = dir.join(man.get_filename());
    let mut text = Vec::new();
    man.render(&mut text)?;
    std::fs::write(&path, text)?;
    written.push(path);
    for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
        page(sub, dir, written)?;
    }
    Ok(())
}

/// The completion script of `shell` for `sluice`, on `out`.
pub fn completions(shell: clap_complete::Shell, out: &mut dyn Write) {
    let mut cmd = Cli::command();
    clap_complete::generate(shell, &mut cmd, "sluice", out);
}
