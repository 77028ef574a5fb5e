//! NOTIFICATION (RFC 4271 §4.5): why a session ends, with RFC 9003's shutdown
//! communication on a Cease.

use super::code;

/// NOTIFICATION body (RFC 4271 §4.5): error code, subcode, data.
///
/// ```text
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// | Error code    | Error subcode |   Data (variable)             |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Notification {
    /// Error code (see [`code`]).
    pub code: u8,
    /// Error subcode.
    pub subcode: u8,
    /// Diagnostic data.
    pub data: Vec<u8>,
}

impl Notification {
    /// A Cease with a shutdown communication (RFC 9003: length octet + UTF-8, <= 255 bytes).
    pub fn cease(subcode: u8, message: &str) -> Notification {
        let mut msg = message.as_bytes().to_vec();
        msg.truncate(255);
        // Truncation may split a UTF-8 sequence; back off to a char boundary.
        while std::str::from_utf8(&msg).is_err() {
            msg.pop();
        }
        let mut data = Vec::with_capacity(msg.len() + 1);
        if !msg.is_empty() {
            data.push(msg.len() as u8);
            data.extend_from_slice(&msg);
        }
        Notification {
            code: code::CEASE,
            subcode,
            data,
        }
    }
}

impl std::fmt::Display for Notification {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let name = match (self.code, self.subcode) {
            (1, _) => "message header error",
            (2, _) => "OPEN message error",
            (3, _) => "UPDATE message error",
            (4, _) => "hold timer expired",
            (5, _) => "FSM error",
            (6, 2) => "cease: administrative shutdown",
            (6, 4) => "cease: administrative reset",
            (6, 7) => "cease: connection collision resolution",
            (6, _) => "cease",
            (7, _) => "ROUTE-REFRESH message error",
            _ => "unknown error",
        };
        write!(f, "{name} ({}/{})", self.code, self.subcode)
    }
}

/// The body after the header; `frame_len` guarantees code and subcode.
pub(super) fn decode_notification(body: &[u8]) -> Notification {
    Notification {
        code: body[0],
        subcode: body[1],
        data: body[2..].to_vec(),
    }
}

pub(super) fn encode_notification(n: &Notification, out: &mut Vec<u8>) {
    out.extend_from_slice(&[n.code, n.subcode]);
    out.extend_from_slice(&n.data);
}
