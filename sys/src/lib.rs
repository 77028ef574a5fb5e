//! The only crate in Sluice with `unsafe`: the kernel interfaces no safe Rust API offers.
//!
//! [`xsk`] is AF_XDP: a socket's UMEM (an mmap'd area the kernel DMAs frames into), its four
//! rings shared with the kernel, and the few ioctls and socket options around them. [`sockopt`]
//! is the BGP speaker's session security (`TCP_MD5SIG`, `IP_MINTTL`, `IPV6_MINHOPCOUNT`).
//! [`ethtool`] installs and removes the NIC's ntuple rules that steer FullNAT return traffic
//! to the queue of the worker that owns it.
//! [`packet`] is AF_PACKET with a classic BPF filter, for the health probes that prove a VIP.
//! [`mem`] hands the heap's freed pages back to the kernel after start-up's parse.
//! [`bpfmem`] maps a BPF array's values into our memory (the flow cache's front table).
//! [`xdp`] replaces an attached XDP program with another in one step.
//! [`signal`] gives short commands SIGPIPE's default back (a closed pipe ends them quietly).
//! Everything else in the workspace is `#![forbid(unsafe_code)]` and reaches the kernel
//! through these safe functions or through maintained crates (libbpf-rs, rtnetlink, nix).
//! Each module opts in with `#![allow(unsafe_code)]`, and every `unsafe` block carries a
//! `// SAFETY:` line saying why it holds (clippy's `undocumented_unsafe_blocks` checks that
//! the line is there).
#![warn(clippy::undocumented_unsafe_blocks)]

pub mod bpfmem;
pub mod ethtool;
pub mod mem;
pub mod packet;
pub mod signal;
pub mod sockopt;
pub mod xdp;
pub mod xsk;
