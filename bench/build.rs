//! Compiles the bench's BPF programs (src/bpf/*.bpf.c: the traffic generators, the sink
//! and the XDP_REDIRECT ceiling) with clang through libbpf-cargo's SkeletonBuilder, so the
//! objects the bench embeds and loads with libbpf-rs are always built from the sources next
//! to them; and, as appliance/build.rs does for the steering program, writes each one's
//! `{name}_types.rs`: the `types` module of the skeleton libbpf-cargo generates from the
//! object's BTF (its structs, config and codes as Rust; the rest of the skeleton has
//! `unsafe` and is not kept). src/abi.rs includes them, so the bench writes a config field
//! at its generated offset, never at one counted by hand.

use std::env;
use std::path::{Path, PathBuf};

use libbpf_cargo::SkeletonBuilder;

const PROGRAMS: [&str; 4] = ["pktgen", "generator", "ceiling", "sink"];

fn main() {
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_else(|_| "x86_64".into());
    // Debian keeps <asm/types.h> under the multiarch directory, which clang -target bpf
    // does not search by itself.
    let multiarch = format!("-I/usr/include/{arch}-linux-gnu");
    // -mcpu=v3 as appliance/build.rs compiles the steering program: the ceiling the flow
    // cache is measured against is compiled the same way.
    for name in PROGRAMS {
        let src = format!("src/bpf/{name}.bpf.c");
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
    }
    println!("cargo:rerun-if-changed=src/bpf");
    // The ceiling's flow key is the appliance's (bpf/structs.h `struct cache_key4`).
    println!("cargo:rerun-if-changed=../appliance/src/datapath/bpf");
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

/// The text between the braces of `pub mod types { ... }` in a generated skeleton (as
/// appliance/build.rs finds it). The generated type definitions hold no braces inside
/// strings or comments, so counting them finds the module's end.
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
