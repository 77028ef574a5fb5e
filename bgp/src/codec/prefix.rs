//! NLRI prefixes (RFC 4271 §4.3, RFC 4760 for IPv6): a length in bits, then the fewest
//! octets holding them; shared by UPDATE's own fields and the MP attributes.

use ipnet::{IpNet, Ipv4Net, Ipv6Net};
use std::net::{Ipv4Addr, Ipv6Addr};

use super::{AFI_IPV4, UpdateError};

pub(super) fn decode_v4_prefixes(v: &[u8]) -> Result<Vec<Ipv4Net>, UpdateError> {
    Ok(decode_prefixes(AFI_IPV4, v)?
        .into_iter()
        .filter_map(|p| match p {
            IpNet::V4(p) => Some(p),
            IpNet::V6(_) => None,
        })
        .collect())
}

/// NLRI encoding (RFC 4271 §4.3): length in bits, then the fewest octets holding them.
pub(super) fn decode_prefixes(afi: u16, mut v: &[u8]) -> Result<Vec<IpNet>, UpdateError> {
    let max = if afi == AFI_IPV4 { 32 } else { 128 };
    let mut out = Vec::new();
    while let [len, rest @ ..] = v {
        let len = *len;
        if len > max {
            return Err(UpdateError::InvalidNetworkField);
        }
        let n = usize::from(len).div_ceil(8);
        if rest.len() < n {
            return Err(UpdateError::InvalidNetworkField);
        }
        let net = if afi == AFI_IPV4 {
            let mut b = [0u8; 4];
            b[..n].copy_from_slice(&rest[..n]);
            Ipv4Net::new(Ipv4Addr::from(b), len)
                .map(|p| IpNet::V4(p.trunc()))
                .map_err(|_| UpdateError::InvalidNetworkField)?
        } else {
            let mut b = [0u8; 16];
            b[..n].copy_from_slice(&rest[..n]);
            Ipv6Net::new(Ipv6Addr::from(b), len)
                .map(|p| IpNet::V6(p.trunc()))
                .map_err(|_| UpdateError::InvalidNetworkField)?
        };
        out.push(net);
        v = &rest[n..];
    }
    Ok(out)
}

pub(super) fn encode_prefix(p: &IpNet, out: &mut Vec<u8>) {
    let len = p.prefix_len();
    out.push(len);
    let n = usize::from(len).div_ceil(8);
    match p {
        IpNet::V4(p) => out.extend_from_slice(&p.network().octets()[..n]),
        IpNet::V6(p) => out.extend_from_slice(&p.network().octets()[..n]),
    }
}
