//! Who may reach a VIP (issue 46): a VIP's `allow` and `deny` lists of source prefixes,
//! written inline or naming a `[[prefix_list]]` that many VIPs share.
//!
//! The verdict for a source is its longest matching rule's, whichever list holds it, so a
//! `deny` of 10.1.0.0/16 inside an `allow` of 10.0.0.0/8 carves a hole, and an `allow` of
//! 10.1.2.0/24 inside that hole opens it again. A source no rule matches is denied when the
//! VIP has an `allow` list and allowed otherwise. Validation refuses rules that can never
//! decide anything (see `validate/acl.rs`), so every rule an operator reads matters.

use std::fmt;
use std::net::IpAddr;

/// One address prefix, host bits clear.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Prefix {
    /// The network address (its bits past `len` are zero).
    pub addr: IpAddr,
    /// The prefix length, at most 32 (IPv4) or 128 (IPv6).
    pub len: u8,
}

/// Why a prefix's text was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PrefixError {
    /// Neither an address nor address/length.
    #[error("is not a prefix such as \"192.0.2.0/24\" or \"2001:db8::/32\"")]
    Syntax,
    /// The length exceeds the family's.
    #[error("has a length over {0}")]
    TooLong(u8),
    /// Bits past the length are set.
    #[error("has bits set past its length (did you mean {0}?)")]
    HostBits(Prefix),
}

impl Prefix {
    /// Parses "192.0.2.0/24", "2001:db8::/32" or a bare address (a host prefix).
    pub fn parse(s: &str) -> Result<Prefix, PrefixError> {
        let (a, l) = match s.split_once('/') {
            Some((a, l)) => (a, Some(l)),
            None => (s, None),
        };
        let addr: IpAddr = a.trim().parse().map_err(|_| PrefixError::Syntax)?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let len = match l {
            None => max,
            Some(l) => l.trim().parse::<u8>().map_err(|_| PrefixError::Syntax)?,
        };
        if len > max {
            return Err(PrefixError::TooLong(max));
        }
        let p = Prefix { addr, len };
        let clear = p.network();
        if clear != p {
            return Err(PrefixError::HostBits(clear));
        }
        Ok(p)
    }

    /// The address's family width in bits.
    pub fn width(&self) -> u8 {
        if self.addr.is_ipv4() { 32 } else { 128 }
    }

    /// The same prefix with its host bits cleared.
    pub fn network(&self) -> Prefix {
        let bits = bits_of(self.addr);
        let w = u32::from(self.width());
        let keep = mask(w, u32::from(self.len));
        let addr = match self.addr {
            IpAddr::V4(_) => IpAddr::V4(((bits & keep) as u32).into()),
            IpAddr::V6(_) => IpAddr::V6((bits & keep).into()),
        };
        Prefix {
            addr,
            len: self.len,
        }
    }

    /// Whether `other` lies inside this prefix (the same family, at least as long).
    pub fn covers(&self, other: &Prefix) -> bool {
        self.addr.is_ipv4() == other.addr.is_ipv4()
            && other.len >= self.len
            && Prefix {
                addr: other.addr,
                len: self.len,
            }
            .network()
                == *self
    }
}

/// An address's bits, right-aligned (IPv4 in the low 32).
fn bits_of(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(v) => u128::from(u32::from(v)),
        IpAddr::V6(v) => u128::from(v),
    }
}

/// The mask of the first `len` of `width` bits.
fn mask(width: u32, len: u32) -> u128 {
    if len == 0 {
        0
    } else {
        (u128::MAX >> (128 - len)) << (width - len)
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// A `[[prefix_list]]`: named prefixes VIPs refer to in their `allow` and `deny`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrefixList {
    pub name: String,
    pub prefixes: Vec<Prefix>,
}

/// One rule of a VIP's lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclRule {
    pub prefix: Prefix,
    /// In `allow` (true) or `deny`.
    pub allow: bool,
    /// Where it was written: the `[[prefix_list]]`'s name, or "allow" / "deny" for a
    /// prefix written in the VIP's own list. Counters and `sluice trace` name it.
    pub list: String,
}

/// A VIP's `allow` and `deny`, resolved: every rule of its family.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SourceAcl {
    /// Every rule (no prefix twice).
    pub rules: Vec<AclRule>,
    /// `allow` is set: a source no rule matches is denied (counted under list "allow").
    pub default_deny: bool,
}

/// Which rule decided a source (see the module docs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AclMatch<'a> {
    /// The VIP has no lists.
    Open,
    /// This rule, the longest match.
    Rule(&'a AclRule),
    /// No rule matched and the VIP has an `allow` list.
    NotAllowed,
}

impl AclMatch<'_> {
    /// Whether the source may reach the VIP.
    pub fn allowed(&self) -> bool {
        match self {
            AclMatch::Open => true,
            AclMatch::Rule(r) => r.allow,
            AclMatch::NotAllowed => false,
        }
    }
}

impl SourceAcl {
    /// Whether the VIP has any list.
    pub fn is_open(&self) -> bool {
        self.rules.is_empty() && !self.default_deny
    }

    /// The rule that decides `src` (a slow, obvious walk: validation and tests; the
    /// datapath's tables are `lb::acl` and the XDP program's tries).
    pub fn decide(&self, src: IpAddr) -> AclMatch<'_> {
        if self.is_open() {
            return AclMatch::Open;
        }
        let host = Prefix {
            addr: src,
            len: if src.is_ipv4() { 32 } else { 128 },
        };
        match self
            .rules
            .iter()
            .filter(|r| r.prefix.covers(&host))
            .max_by_key(|r| r.prefix.len)
        {
            Some(r) => AclMatch::Rule(r),
            None if self.default_deny => AclMatch::NotAllowed,
            None => AclMatch::Open,
        }
    }

    /// The list names a drop may be counted under, each once, in rule order ("allow" last
    /// when a source no rule matches is denied).
    pub fn deny_lists(&self) -> Vec<&str> {
        let mut out: Vec<&str> = Vec::new();
        for r in self.rules.iter().filter(|r| !r.allow) {
            if !out.contains(&r.list.as_str()) {
                out.push(&r.list);
            }
        }
        if self.default_deny && !out.contains(&"allow") {
            out.push("allow");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefixes_parse_and_refuse() {
        let p = Prefix::parse("10.1.0.0/16").unwrap();
        assert_eq!(p.to_string(), "10.1.0.0/16");
        assert_eq!(Prefix::parse("192.0.2.7").unwrap().len, 32);
        assert_eq!(Prefix::parse("2001:db8::/32").unwrap().len, 32);
        assert_eq!(Prefix::parse("10.0.0.0/33"), Err(PrefixError::TooLong(32)));
        assert_eq!(
            Prefix::parse("10.1.2.3/16"),
            Err(PrefixError::HostBits(Prefix::parse("10.1.0.0/16").unwrap()))
        );
        assert_eq!(Prefix::parse("web"), Err(PrefixError::Syntax));
        assert_eq!(Prefix::parse("0.0.0.0/0").unwrap().len, 0);
    }

    #[test]
    fn covers_is_family_and_length_aware() {
        let a = Prefix::parse("10.0.0.0/8").unwrap();
        assert!(a.covers(&Prefix::parse("10.9.0.0/16").unwrap()));
        assert!(!a.covers(&Prefix::parse("11.0.0.0/16").unwrap()));
        assert!(!a.covers(&Prefix::parse("0.0.0.0/0").unwrap()));
        assert!(!a.covers(&Prefix::parse("::/0").unwrap()));
        let z = Prefix::parse("::/0").unwrap();
        assert!(z.covers(&Prefix::parse("2001:db8::1").unwrap()));
    }

    #[test]
    fn longest_match_decides() {
        let rule = |p: &str, allow: bool| AclRule {
            prefix: Prefix::parse(p).unwrap(),
            allow,
            list: if allow { "allow" } else { "deny" }.into(),
        };
        let acl = SourceAcl {
            rules: vec![
                rule("10.0.0.0/8", true),
                rule("10.1.0.0/16", false),
                rule("10.1.2.0/24", true),
            ],
            default_deny: true,
        };
        let ok = |s: &str| acl.decide(s.parse().unwrap()).allowed();
        assert!(ok("10.9.9.9"));
        assert!(!ok("10.1.9.9"));
        assert!(ok("10.1.2.9"));
        assert!(!ok("192.0.2.1"));
        assert_eq!(acl.deny_lists(), ["deny", "allow"]);
    }
}
