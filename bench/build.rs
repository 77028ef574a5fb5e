//! Compiles the bench's BPF programs (src/bpf/*.bpf.c: the traffic generators, the sink
//! and the XDP_REDIRECT ceiling) with clang through libbpf-cargo's SkeletonBuilder, so the
//! objects the bench embeds and loads with libbpf-rs are always built from the sources next
//! to them.

use std::env;
use std::path::PathBuf;

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
        if let Err(e) = SkeletonBuilder::new()
            .source(&src)
            .obj(out.join(format!("{name}.bpf.o")))
            .clang_args([multiarch.as_str(), "-mcpu=v3", "-O2", "-g", "-Wall"])
            .build()
        {
            panic!(
                "cannot build {src}: {e:#}\n(needs clang, llvm, libelf-dev, zlib1g-dev, \
                 linux-libc-dev; see scripts/setup.sh)"
            );
        }
        println!("cargo:rerun-if-changed={src}");
    }
}
