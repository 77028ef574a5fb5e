//! Sluice's operator tools: the local API's types and client, and (soon) the terminal
//! console. Nothing here touches the datapath: the console and `sluice ctl` talk to the
//! running appliance through its API only, so quitting or crashing them never disturbs
//! forwarding.
#![forbid(unsafe_code)]

pub mod api;
pub mod console;
