//! `[[prefix_list]]` and a `[[vip]]`'s `allow` and `deny` (issue 46; the model and its
//! longest-match rule are in `crate::acl`). Each entry of `allow` or `deny` is a prefix
//! ("10.0.0.0/8", or an address for one host) or the name of a `[[prefix_list]]`.
//!
//! A rule that can never decide a source is refused, named with the rule that makes it so:
//! the same prefix twice (in both lists it would contradict itself), a rule whose nearest
//! covering rule has the same verdict (it changes nothing), and a `deny` no `allow` covers
//! when the VIP has an `allow` list (every source it names is denied anyway). A rule of the other address family than the VIP is
//! refused when written inline; a shared list may mix families, and only the VIP's own
//! family of it applies.

use std::net::IpAddr;

use crate::acl::{AclRule, Prefix, PrefixList, SourceAcl};
use crate::error::ConfigErrors;
use crate::reader::{Table, element_path};

/// The most rules all VIPs' lists may hold together, per address family: the size of the
/// XDP program's tries.
pub const MAX_ACL_RULES: usize = 65536;

/// Reads every `[[prefix_list]]`.
pub(super) fn prefix_lists(top: &mut Table<'_>, errs: &mut ConfigErrors) -> Vec<PrefixList> {
    let mut out: Vec<PrefixList> = Vec::new();
    for (i, map) in top.tables("prefix_list", errs) {
        let path = element_path("", "prefix_list", i, map);
        let mut t = Table::new(path.clone(), map);
        let name = t.req_string("name", errs);
        super::check_name(&t, name.as_ref(), errs);
        let mut prefixes = Vec::new();
        match t.strings("prefixes", errs) {
            Some(items) => {
                for (key, text) in items {
                    match Prefix::parse(&text) {
                        Ok(p) if prefixes.contains(&p) => {
                            errs.push(key, format!("{p} is listed twice"))
                        }
                        Ok(p) => prefixes.push(p),
                        Err(e) => errs.push(key, format!("{text:?} {e}")),
                    }
                }
            }
            None => errs.push(t.key("prefixes"), "missing: a prefix list needs prefixes"),
        }
        t.finish(errs);
        let Some(name) = name else { continue };
        if out.iter().any(|l| l.name == name) {
            errs.push(path, format!("prefix_list name {name:?} used twice"));
            continue;
        }
        out.push(PrefixList { name, prefixes });
    }
    out
}

/// Reads a VIP's `allow` and `deny` against `lists`, for a VIP at `address`.
pub(super) fn vip_acl(
    t: &mut Table<'_>,
    lists: &[PrefixList],
    address: Option<IpAddr>,
    errs: &mut ConfigErrors,
) -> SourceAcl {
    let v4 = address.is_none_or(|a| a.is_ipv4());
    let mut acl = SourceAcl::default();
    let mut at: Vec<String> = Vec::new();
    for (key, allow) in [("allow", true), ("deny", false)] {
        let Some(items) = t.strings(key, errs) else {
            continue;
        };
        acl.default_deny |= allow;
        for (path, text) in items {
            let found = resolve(&text, lists, key, &path, v4, errs);
            for (prefix, list) in found {
                if let Some(i) = acl.rules.iter().position(|r| r.prefix == prefix) {
                    let r = &acl.rules[i];
                    let why = if r.allow == allow {
                        format!("{prefix} is already in {} ({})", r.list, at[i])
                    } else {
                        format!(
                            "{prefix} is in both allow and deny (also {}, {}): which wins?",
                            r.list, at[i]
                        )
                    };
                    errs.push(path.clone(), why);
                    continue;
                }
                acl.rules.push(AclRule {
                    prefix,
                    allow,
                    list,
                });
                at.push(path.clone());
            }
        }
    }
    unreachable_rules(&acl, &at, errs);
    acl
}

/// One entry of `allow` or `deny`: its prefixes of the VIP's family, each with the list it
/// came from.
fn resolve(
    text: &str,
    lists: &[PrefixList],
    key: &str,
    path: &str,
    v4: bool,
    errs: &mut ConfigErrors,
) -> Vec<(Prefix, String)> {
    if let Some(l) = lists.iter().find(|l| l.name == text) {
        let mine: Vec<(Prefix, String)> = l
            .prefixes
            .iter()
            .filter(|p| p.addr.is_ipv4() == v4)
            .map(|p| (*p, l.name.clone()))
            .collect();
        if mine.is_empty() {
            let fam = if v4 { "IPv4" } else { "IPv6" };
            errs.push(
                path,
                format!("prefix_list {text:?} has no {fam} prefix: it decides nothing here"),
            );
        }
        return mine;
    }
    match Prefix::parse(text) {
        Ok(p) if p.addr.is_ipv4() != v4 => {
            let fam = if v4 { "IPv4" } else { "IPv6" };
            errs.push(
                path,
                format!("{p} can never match: the VIP is {fam}, so are its clients"),
            );
            Vec::new()
        }
        Ok(p) => vec![(p, key.to_string())],
        Err(crate::acl::PrefixError::Syntax) => {
            errs.push(
                path,
                format!("{text:?} is neither a prefix nor the name of a [[prefix_list]]"),
            );
            Vec::new()
        }
        Err(e) => {
            errs.push(path, format!("{text:?} {e}"));
            Vec::new()
        }
    }
}

/// Refuses every rule that decides nothing (see the module docs); `at[i]` is where rule `i`
/// was written.
fn unreachable_rules(acl: &SourceAcl, at: &[String], errs: &mut ConfigErrors) {
    let word = |allow: bool| if allow { "allow" } else { "deny" };
    for (i, r) in acl.rules.iter().enumerate() {
        let parent = acl
            .rules
            .iter()
            .enumerate()
            .filter(|(j, p)| *j != i && p.prefix.covers(&r.prefix) && p.prefix != r.prefix)
            .max_by_key(|(_, p)| p.prefix.len);
        let why = match parent {
            Some((j, p)) if p.allow == r.allow => format!(
                "{} {} ({}) changes nothing: {} {} ({}, {}) already covers it",
                word(r.allow),
                r.prefix,
                r.list,
                word(p.allow),
                p.prefix,
                p.list,
                at[j]
            ),
            None if !r.allow && acl.default_deny => format!(
                "deny {} ({}) changes nothing: no allow rule covers it, so its sources are \
                 denied anyway",
                r.prefix, r.list
            ),
            _ => continue,
        };
        errs.push(at[i].clone(), why);
    }
}

/// Refuses lists that together outgrow the XDP program's tries. Counted as the datapath
/// writes them (appliance `datapath/steer/acl.rs`): each rule in its prefix's family, one
/// default entry in the VIP's family when only allowed sources may come; a VIP without
/// lists, or a tenant's (enforced by the engine), takes none.
pub(super) fn total_rules(vips: &[crate::model::Vip], errs: &mut ConfigErrors) {
    for v4 in [true, false] {
        let n: usize = vips
            .iter()
            .filter(|v| !v.acl.is_open() && v.tenant_vni.is_none())
            .map(|v| {
                let rules = v.acl.rules.iter();
                let default = v.acl.default_deny && v.address.is_ipv4() == v4;
                rules.filter(|r| r.prefix.addr.is_ipv4() == v4).count() + usize::from(default)
            })
            .sum();
        if n > MAX_ACL_RULES {
            errs.push(
                "vip",
                format!(
                    "the VIPs' allow and deny lists hold {n} {} entries (their rules, and one \
                     default for each VIP with an allow list), over the {MAX_ACL_RULES} the \
                     XDP program holds",
                    if v4 { "IPv4" } else { "IPv6" }
                ),
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Config;

    /// The bench's 100,000 VIPs without lists were refused as 100,000 rules: a VIP without
    /// lists takes no entry in the program's tries.
    #[test]
    fn only_the_entries_the_program_writes_count_against_its_tries() {
        let c = Config::from_toml_str(
            "[appliance]\nname = \"lb1\"\ninterfaces = [\"eth0\"]\n\n\
             [[vip]]\nname = \"open\"\naddress = \"192.0.2.1\"\nport = 80\nmode = \"dr\"\n\
             [[vip.backend]]\naddress = \"10.1.0.11\"\n\n\
             [[vip]]\nname = \"listed\"\naddress = \"192.0.2.2\"\nport = 80\nmode = \"dr\"\n\
             allow = [\"10.0.0.0/8\", \"198.51.100.0/24\"]\ndeny = [\"10.9.0.0/16\"]\n\
             [[vip.backend]]\naddress = \"10.1.0.11\"\n",
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let (open, listed) = (&c.vips[0], &c.vips[1]);
        let count = |open_n: usize, listed_n: usize| {
            let mut vips = vec![open.clone(); open_n];
            vips.extend(std::iter::repeat_n(listed.clone(), listed_n));
            let mut errs = ConfigErrors::default();
            total_rules(&vips, &mut errs);
            errs.len()
        };
        assert_eq!(count(100_000, 0), 0, "VIPs without lists take no entry");
        // Three rules and the default: four entries each.
        assert_eq!(count(100_000, MAX_ACL_RULES / 4), 0);
        assert_eq!(count(0, MAX_ACL_RULES / 4 + 1), 1);
    }
}
