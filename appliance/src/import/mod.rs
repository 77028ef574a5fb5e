//! `sluice import`: other load balancers' configurations turned into a commented
//! sluice.toml, so an operator migrating to Sluice starts from what already runs. Each
//! source format has its own module; all of them write placeholders for what only the
//! appliance knows and list what they could not carry over.

pub mod keepalived;
