//! Compiles the datapath's BPF program (src/datapath/bpf/steer.bpf.c: the XDP steering
//! program with its flow cache) with clang through libbpf-cargo's SkeletonBuilder,
//! so the objects the datapath embeds and loads with libbpf-rs are always built from the
//! sources next to them.
//!
//! For each program it also writes `{name}_types.rs`: the `types` module of the
//! skeleton libbpf-cargo generates from the object's BTF, which holds every struct the
//! program declares (map keys and values, `xdp_md`) as `#[repr(C)]` Rust. The datapath
//! reads its offsets and field types from there (datapath/abi.rs), so a struct changed in
//! the C changes the Rust mirror with it, and a field the Rust relies on that is renamed,
//! retyped or removed fails the build. Only the `types` module is kept: the rest of the
//! skeleton has `unsafe`, which the appliance crate forbids (it loads the object with
//! libbpf-rs's safe API instead).

use std::env;
use std::path::{Path, PathBuf};

use libbpf_cargo::SkeletonBuilder;

const PROGRAMS: [&str; 1] = ["steer"];

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into());
    // Debian keeps <asm/types.h> under the multiarch directory, which clang -target bpf
    // does not search by itself.
    let multiarch = format!("-I/usr/include/{arch}-linux-gnu");
    // -mcpu=v3: 32-bit ALU and jumps (kernel 5.1 and later; the image runs 6.12). Debian's
    // clang 14 defaults to v1, which widens every 32-bit value with two shifts and loads
    // each constant it compares into a register first: the steering program is 7% longer
    // (3,705 instructions against 3,452).
    for name in PROGRAMS {
        let src = format!("src/datapath/bpf/{name}.bpf.c");
        let skel = out.join(format!("{name}.skel.rs"));
        if let Err(e) = SkeletonBuilder::new()
            .source(&src)
            .obj(out.join(format!("{name}.bpf.o")))
            .clang_args([multiarch.as_str(), "-mcpu=v3", "-O2", "-g", "-Wall"])
            .build_and_generate(&skel)
        {
            panic!(
                "cannot build {src}: {e:#}\n(needs clang, llvm, libelf-dev, zlib1g-dev, \
                 linux-libc-dev; see scripts/setup.sh)"
            );
        }
        write_types(&skel, &out.join(format!("{name}_types.rs")));
        println!("cargo:rerun-if-changed={src}");
    }
}

/// Copies the body of the skeleton's `pub mod types { ... }` from `skel` to `to`.
fn write_types(skel: &Path, to: &Path) {
    let text = std::fs::read_to_string(skel)
        .unwrap_or_else(|e| panic!("cannot read the generated {}: {e}", skel.display()));
    let Some(body) = types_module(&text) else {
        panic!(
            "the skeleton {} has no `pub mod types` (a libbpf-cargo whose generated code \
             changed shape: update build.rs's types_module)",
            skel.display()
        );
    };
    std::fs::write(to, body).unwrap_or_else(|e| panic!("cannot write {}: {e}", to.display()));
}

/// The text between the braces of `pub mod types { ... }` in a generated skeleton. The
/// generated type definitions hold no braces inside strings or comments, so counting
/// them finds the module's end.
fn types_module(skel: &str) -> Option<&str> {
    let open = skel.find("pub mod types {")? + "pub mod types ".len();
    let mut depth = 0usize;
    for (i, c) in skel[open..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(&skel[open + 1..open + i]);
                }
            }
            _ => {}
        }
    }
    None
}
