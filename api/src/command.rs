//! The API's write calls as data. `sluice ctl` parses one from its arguments, the console's
//! `update` returns one for a key, and [`Client::send`](crate::Client::send) makes it: one
//! type, so both say and do the same thing for the same change.

use crate::model::BackendAction;

/// One change asked of the appliance; every one answers with a [`Commit`](crate::Commit).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Command {
    /// Drain, undrain, disable or enable a backend (`address:port`, or the address alone
    /// when the VIP has one backend at that address).
    Backend {
        vip: String,
        backend: String,
        action: BackendAction,
    },
    /// Set a backend's weight.
    Weight {
        vip: String,
        backend: String,
        weight: u32,
    },
    /// Announce a VIP again (`true`) or withdraw it (`false`).
    Announce { vip: String, announce: bool },
    /// Reload the config file.
    Reload,
    /// Take the datapath interfaces another XDP program holds back from it.
    ReclaimDatapath,
}

impl Command {
    /// The change in words: `drain backend 10.0.0.7:80 of VIP web`.
    pub fn describe(&self) -> String {
        match self {
            Command::Backend {
                vip,
                backend,
                action,
            } => format!("{} backend {backend} of VIP {vip}", action.name()),
            Command::Weight {
                vip,
                backend,
                weight,
            } => format!("weight {weight} for backend {backend} of VIP {vip}"),
            Command::Announce { vip, announce } => {
                format!(
                    "{} VIP {vip}",
                    if *announce { "announce" } else { "withdraw" }
                )
            }
            Command::Reload => "reload".to_string(),
            Command::ReclaimDatapath => "take the datapath back".to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn describes_the_change() {
        let c = Command::Backend {
            vip: "web".into(),
            backend: "10.0.0.7:80".into(),
            action: BackendAction::Drain,
        };
        assert_eq!(c.describe(), "drain backend 10.0.0.7:80 of VIP web");
        assert_eq!(
            Command::Announce {
                vip: "web".into(),
                announce: false
            }
            .describe(),
            "withdraw VIP web"
        );
    }
}
