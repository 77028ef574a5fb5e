//! Compiles the datapath's BPF program (src/datapath/bpf/steer.bpf.c, the XDP steering
//! program, and the headers it includes) with clang through libbpf-cargo's SkeletonBuilder,
//! so the object the datapath embeds and loads with libbpf-rs is always built from the
//! sources next to it, and writes what the Rust side knows of it, all from the C:
//!
//! - `{name}_types.rs`: the `types` module of the skeleton libbpf-cargo generates from the
//!   object's BTF, which holds every struct the program declares (map keys and values,
//!   `xdp_md`) as `#[repr(C)]` Rust, and every enum that types a key or a field (the codes
//!   of consts.h) as a newtype with its values. The datapath reads offsets, field types and
//!   codes from there (datapath/abi.rs), so a struct or code changed in the C changes the
//!   Rust with it, and one the Rust relies on that is renamed, retyped or removed fails the
//!   build. Only the `types` module is kept: the rest of the skeleton has `unsafe`, which the
//!   appliance crate forbids (it loads the object with libbpf-rs's safe API instead).
//! - `{name}_maps.rs`: one constant per map of the object, its name and size (abi.rs
//!   `maps`): the one table the datapath finds maps by, and where it reads the sizes the
//!   program was built with (interfaces, queues, counter slots, ring room).
//! - `{name}_defines.rs`: the values BTF cannot carry, from their `#define` lines in
//!   bpf/consts.h (abi.rs `defines`).

use std::env;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use libbpf_cargo::SkeletonBuilder;

const PROGRAMS: [&str; 1] = ["steer"];

/// The `#define`s of src/datapath/bpf/consts.h the Rust side reads, with their Rust types.
const DEFINES: [(&str, &str); 11] = [
    ("FRONT_M0", "u64"),
    ("FRONT_M1", "u64"),
    ("FRONT_M2", "u64"),
    ("FRONT_M3", "u64"),
    ("FRONT_M4", "u64"),
    ("FLOW_SEED", "u32"),
    ("JHASH_INITVAL", "u32"),
    ("VXLAN_PORT", "u16"),
    ("MAX_EXT_HEADERS", "usize"),
    ("TRACK_MAX_ADVANCE", "u32"),
    ("CAPTURE_SNAP_MAX", "u32"),
];

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
        let obj = out.join(format!("{name}.bpf.o"));
        let skel = out.join(format!("{name}.skel.rs"));
        if let Err(e) = SkeletonBuilder::new()
            .source(&src)
            .obj(&obj)
            .clang_args([multiarch.as_str(), "-mcpu=v3", "-O2", "-g", "-Wall"])
            .build_and_generate(&skel)
        {
            panic!(
                "cannot build {src}: {e:#}\n(needs clang, llvm, libelf-dev, zlib1g-dev, \
                 linux-libc-dev; see scripts/setup.sh)"
            );
        }
        write_types(&skel, &out.join(format!("{name}_types.rs")));
        write(&out.join(format!("{name}_maps.rs")), &maps_table(&obj));
    }
    let consts = Path::new("src/datapath/bpf/consts.h");
    let text = std::fs::read_to_string(consts)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", consts.display()));
    let defines = defines_table(&text).unwrap_or_else(|e| panic!("{}: {e}", consts.display()));
    write(&out.join("steer_defines.rs"), &defines);
    // The program and every header it includes.
    println!("cargo:rerun-if-changed=src/datapath/bpf");
}

fn write(to: &Path, text: &str) {
    std::fs::write(to, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", to.display()));
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
    write(to, body);
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

/// A `MapDef` constant per map the object declares (named as the map, upper case) and
/// `ALL`, every one in the object's order. The object's own data sections (`.rodata`),
/// which libbpf also lists as maps, are not the program's maps and are left out.
fn maps_table(obj: &Path) -> String {
    let open = libbpf_rs::ObjectBuilder::default()
        .open_file(obj)
        .unwrap_or_else(|e| panic!("cannot open the built {}: {e}", obj.display()));
    let mut text = String::from("// Generated by build.rs from the object's maps.\n");
    let mut all = Vec::new();
    for m in open.maps() {
        let name = m.name().to_string_lossy().into_owned();
        if name.contains('.') {
            continue;
        }
        let konst = name.to_uppercase();
        let entries = m.max_entries();
        let _ = writeln!(
            text,
            "/// The map `{name}` ({:?}, max_entries {entries}).\n\
             pub(crate) const {konst}: MapDef = MapDef {{ name: {name:?}, entries: {entries} }};",
            m.map_type()
        );
        all.push(konst);
    }
    let _ = writeln!(
        text,
        "/// Every map of the program, in the object's order.\n\
         pub(crate) const ALL: [MapDef; {}] = [{}];",
        all.len(),
        all.join(", ")
    );
    text
}

/// A constant per entry of [`DEFINES`], with the value its `#define` line in `header` gives
/// it: an integer literal, decimal or hexadecimal, with an optional `u`, `l` or `ull` suffix.
/// An error names a define that is missing, given twice, not a plain literal, or too wide
/// for its Rust type.
fn defines_table(header: &str) -> Result<String, String> {
    let mut text = String::from("// Generated by build.rs from bpf/consts.h.\n");
    for (name, ty) in DEFINES {
        let values: Vec<&str> = header
            .lines()
            .filter_map(|l| {
                let mut words = l.trim().strip_prefix("#define")?.split_whitespace();
                (words.next()? == name).then(|| words.next().unwrap_or(""))
            })
            .collect();
        let [literal] = values[..] else {
            return Err(format!(
                "#define {name} found {} times (want 1)",
                values.len()
            ));
        };
        let digits = literal.trim_end_matches(['u', 'U', 'l', 'L']);
        let value = match digits.strip_prefix("0x").or(digits.strip_prefix("0X")) {
            Some(hex) => u64::from_str_radix(hex, 16),
            None => digits.parse::<u64>(),
        }
        .map_err(|e| format!("#define {name} {literal}: not an integer literal ({e})"))?;
        let max = match ty {
            "u16" => u64::from(u16::MAX),
            "u32" => u64::from(u32::MAX),
            _ => u64::MAX,
        };
        if value > max {
            return Err(format!("#define {name} {literal}: wider than {ty}"));
        }
        let _ = writeln!(
            text,
            "/// consts.h `{name}`.\npub(crate) const {name}: {ty} = {value:#x};"
        );
    }
    Ok(text)
}
