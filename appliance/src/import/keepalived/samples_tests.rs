//! keepalived's own sample configurations (`examples/keepalived/samples/`, from keepalived's
//! `doc/samples/`) through the import: each one's output (or refusal) against its golden
//! file, every imported one valid once filled in, every refused line inside its sample.

use super::tests::assert_valid;
use super::{ImportError, import};

fn samples() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/keepalived/samples")
}

/// Compares `got` with the golden file `path` (`SLUICE_UPDATE_GOLDEN=1` rewrites it).
#[track_caller]
fn golden(path: &std::path::Path, got: &str) {
    if std::env::var_os("SLUICE_UPDATE_GOLDEN").is_some() {
        std::fs::write(path, got).expect("write golden");
    }
    let want = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: {e} (SLUICE_UPDATE_GOLDEN=1 writes it)", path.display()));
    assert_eq!(got, want, "output differs from {}", path.display());
}

#[test]
fn keepalived_s_samples_import_or_are_refused_line_by_line() {
    let mut names: Vec<String> = std::fs::read_dir(samples())
        .expect("samples")
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| {
            n.starts_with("keepalived.conf.") && !n.contains(".sluice.") && !n.ends_with(".refused")
        })
        .collect();
    names.sort();
    assert_eq!(names.len(), 25, "{names:?}");
    let (mut imported, mut refused, mut nothing) = (0, 0, 0);
    for name in &names {
        let path = samples().join(name);
        let bytes = std::fs::read(&path).expect("sample");
        let lines = 1 + bytes.iter().filter(|b| **b == b'\n').count();
        let toml = samples().join(format!("{name}.sluice.toml"));
        let why = samples().join(format!("{name}.refused"));
        match import(&bytes, name) {
            Ok(out) => {
                imported += 1;
                assert_valid(&out);
                golden(&toml, &out.toml);
                assert!(
                    !why.exists(),
                    "{name}: imports, but {} exists",
                    why.display()
                );
            }
            Err(e @ ImportError::Refused(_)) => {
                refused += 1;
                let ImportError::Refused(l) = &e else {
                    unreachable!()
                };
                assert!(!l.notes.is_empty(), "{name}");
                for n in &l.notes {
                    assert!((1..=lines).contains(&n.line), "{name}: {n}");
                }
                golden(&why, &format!("{e}\n"));
                assert!(
                    !toml.exists(),
                    "{name}: refused, but {} exists",
                    toml.display()
                );
            }
            Err(ImportError::Nothing(_)) => {
                // VRRP-only samples: nothing of the LVS half to carry.
                nothing += 1;
                golden(&why, "no virtual_server: a VRRP-only configuration\n");
            }
            Err(other) => panic!("{name}: {other}"),
        }
    }
    println!("samples: {imported} imported, {refused} refused, {nothing} without a virtual_server");
}
