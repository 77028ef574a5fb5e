//! ROUTE-REFRESH (RFC 2918, enhanced RFC 7313): a peer asking for our routes again.

use super::DecodeError;

/// ROUTE-REFRESH body (RFC 2918 §3, subtype RFC 7313 §3.2).
///
/// ```text
///  0       7      15      23      31
/// +-------+-------+-------+-------+
/// |      AFI      | Subtyp| SAFI  |
/// +-------+-------+-------+-------+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteRefresh {
    /// Address family.
    pub afi: u16,
    /// 0 normal request, 1 begin of route refresh, 2 end of route refresh.
    pub subtype: u8,
    /// Subsequent address family.
    pub safi: u8,
}

/// The body after the header; `len` is the whole message's, for the error.
pub(super) fn decode_route_refresh(body: &[u8], len: usize) -> Result<RouteRefresh, DecodeError> {
    if body.len() != 4 {
        return Err(DecodeError::RouteRefreshLength(len as u16));
    }
    Ok(RouteRefresh {
        afi: u16::from_be_bytes([body[0], body[1]]),
        subtype: body[2],
        safi: body[3],
    })
}

pub(super) fn encode_route_refresh(r: &RouteRefresh, out: &mut Vec<u8>) {
    out.extend_from_slice(&r.afi.to_be_bytes());
    out.extend_from_slice(&[r.subtype, r.safi]);
}
