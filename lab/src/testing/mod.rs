//! One copy of every helper the integration tests share (`tests/*.rs`; `tests/bgp_common`
//! keeps only what needs the bgp crate): the `sluice` binary under test and its `ctl`
//! ([`Sluice`], [`crate::sluice!`]), labs built and served for a test ([`build`],
//! [`Lab::start_serving`]), bounded waits ([`poll`], [`wait_for`], [`wait_until`]), the
//! client's view of a VIP ([`Whoami`], [`steady_client`]), the API from a test thread
//! ([`Api`]), routers and servers a test starts ([`BirdRouter`], [`Frr`], [`Nginx`]), spoofed
//! floods ([`Spray`]), and
//! the small things around them (scratch directories, daemons killed on drop, log tails,
//! metric samples).
//!
//! Built with the `testing` feature, which the integration tests turn on (the appliance's,
//! bgp's and health's dev-dependency); `sluice lab` and `sluice bench` do not use it. Like the short forms of [`crate::netns`], every helper
//! panics with a message naming what failed (a failed setup step is a failed test), and
//! every process, directory and namespace it makes goes away on drop, also when the test
//! fails. Where copies of a helper used to differ (timeouts, poll intervals), the
//! difference is a parameter.

mod api;
mod client;
mod files;
mod labs;
mod nginx;
mod routers;
mod sluice;
mod spray;
mod wait;

pub use api::{Api, async_in};
pub use client::{
    Download, SteadyReport, Whoami, slow_downloads, slow_downloads_for, steady_client,
};
pub use files::{Daemon, TempDir, file_text, log_lines, output_text, repo, sample, tail};
pub use labs::{build, golden_netns, require_sync_lab, serial};
pub use nginx::Nginx;
pub use routers::{BirdRouter, Frr, kernel_route};
pub use sluice::{Said, Sluice};
pub use spray::{Spray, SprayKind};
pub use wait::{FAILOVER_POLL, poll, wait_for, wait_until};

#[allow(unused_imports)] // for the doc links above
use crate::Lab;
