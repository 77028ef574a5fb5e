//! Scratch directories, daemons and files of a test: made unique, removed or killed on drop,
//! read without failing (a missing log reads as empty; the assertion that needed it says
//! what is wrong).

use std::path::{Path, PathBuf};
use std::process::{Child, Output};

/// A scratch directory (under the system's temp directory, named from `tag` and
/// [`crate::netns::unique`]), removed with everything in it on drop.
#[derive(Debug)]
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// Creates the directory.
    pub fn new(tag: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("{tag}-{}", crate::netns::unique("d")));
        std::fs::create_dir_all(&p).unwrap_or_else(|e| panic!("mkdir {}: {e}", p.display()));
        TempDir(p)
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.0
    }

    /// `name` inside the directory, as text (for command lines).
    pub fn path(&self, name: &str) -> String {
        self.0.join(name).to_string_lossy().into_owned()
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A child process killed and reaped on drop (before the namespace it runs in goes).
#[derive(Debug)]
pub struct Daemon(pub Child);

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The text of `path`, empty when it cannot be read (a log not written yet).
pub fn file_text(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// The last `n` lines of `text`.
pub fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// What a command printed, stdout then stderr.
pub fn output_text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// The repository's top directory (examples/, docs/, scripts/).
pub fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("lab/ is in the repository")
        .to_path_buf()
}

/// The value of the sample `name` (with its labels, as `name{by="xdp"}`) in a Prometheus
/// exposition, when the text has it.
pub fn sample(text: &str, name: &str) -> Option<f64> {
    text.lines().find_map(|l| {
        let value = l.strip_prefix(name)?;
        value
            .starts_with([' ', '\t'])
            .then(|| value.trim().parse().ok())?
    })
}

/// The lines of every appliance log in `dir` (`sluice*.log*`: each process's, takeovers'
/// included) that contain `needle`, each after its file's name: a failure's diagnosis
/// (`"health: "` shows every verdict that changed while the test ran).
pub fn log_lines(dir: &Path, needle: &str) -> Vec<String> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    names.retain(|p| {
        p.file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.starts_with("sluice") && n.contains(".log"))
    });
    names.sort();
    let mut out = Vec::new();
    for p in names {
        let name = p.file_name().map(|n| n.to_string_lossy().to_string());
        for l in file_text(&p).lines().filter(|l| l.contains(needle)) {
            out.push(format!("{}: {l}", name.clone().unwrap_or_default()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn samples_and_tails() {
        let text = "# HELP x\nsluice_x_total 5\nsluice_x 2\nsluice_y{by=\"xdp\"} 7\n";
        assert_eq!(sample(text, "sluice_x"), Some(2.0));
        assert_eq!(sample(text, "sluice_x_total"), Some(5.0));
        assert_eq!(sample(text, "sluice_y{by=\"xdp\"}"), Some(7.0));
        assert_eq!(sample(text, "sluice_z"), None);
        assert_eq!(tail("a\nb\nc", 2), "b\nc");
        assert_eq!(tail("a", 5), "a");
    }
}
