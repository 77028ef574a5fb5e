//! What a traced flow's VIP's `allow` and `deny` lists say about its client: the rule that
//! decides (the longest match, `config::acl`), and the engine's own verdict beside it
//! (`lb::acl`), which a trace shows when they disagree rather than hide it.

use std::net::IpAddr;

use crate::config::{AclMatch, SourceAcl};
use crate::lb::hash::addr_to_u128;
use crate::lb::tables::VipEntry;

/// The source line of a trace; `None` for a VIP without lists.
pub(super) fn source_line(acl: &SourceAcl, v: &VipEntry, client: IpAddr) -> Option<String> {
    let line = match acl.decide(client) {
        AclMatch::Open => return None,
        AclMatch::Rule(r) => format!(
            "{} by {} {} ({})",
            if r.allow { "allowed" } else { "DENIED" },
            if r.allow { "allow" } else { "deny" },
            r.prefix,
            r.list
        ),
        AclMatch::NotAllowed => "DENIED: no allow rule matches".to_string(),
    };
    let engine = v.allows(addr_to_u128(client));
    if engine != acl.decide(client).allowed() {
        return Some(format!(
            "{line} (but the engine's tables say otherwise: a bug)"
        ));
    }
    Some(line)
}
