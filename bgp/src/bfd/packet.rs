//! The BFD control packet (RFC 5880 §4.1, mandatory section) and the reception checks of
//! §6.8.6 that depend on the packet alone, so every malformed packet is dropped before it
//! reaches a session and each reason has its own counter.

use thiserror::Error;

/// Diagnostic codes, IANA "BFD Diagnostic Codes" registry (RFC 5880 §4.1, §8):
///
/// ```text
/// 0 No Diagnostic                     5 Path Down
/// 1 Control Detection Time Expired    6 Concatenated Path Down
/// 2 Echo Function Failed              7 Administratively Down
/// 3 Neighbor Signaled Session Down    8 Reverse Concatenated Path Down
/// 4 Forwarding Plane Reset            9-31 Unassigned (or later assignments)
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Diag {
    /// 0: no diagnostic.
    NoDiagnostic,
    /// 1: the detection time passed without a packet from the neighbour.
    ControlDetectionTimeExpired,
    /// 2: the echo function failed.
    EchoFunctionFailed,
    /// 3: the neighbour told us its session went down.
    NeighborSignaledSessionDown,
    /// 4: forwarding plane reset.
    ForwardingPlaneReset,
    /// 5: path down.
    PathDown,
    /// 6: concatenated path down.
    ConcatenatedPathDown,
    /// 7: administratively down.
    AdministrativelyDown,
    /// 8: reverse concatenated path down.
    ReverseConcatenatedPathDown,
    /// A code this implementation does not name (kept so the packet round-trips).
    Other(u8),
}

impl Diag {
    /// The registry value (5 bits on the wire).
    pub fn code(self) -> u8 {
        match self {
            Diag::NoDiagnostic => 0,
            Diag::ControlDetectionTimeExpired => 1,
            Diag::EchoFunctionFailed => 2,
            Diag::NeighborSignaledSessionDown => 3,
            Diag::ForwardingPlaneReset => 4,
            Diag::PathDown => 5,
            Diag::ConcatenatedPathDown => 6,
            Diag::AdministrativelyDown => 7,
            Diag::ReverseConcatenatedPathDown => 8,
            Diag::Other(c) => c & 0x1f,
        }
    }

    /// The diagnostic for a 5-bit code; higher bits are ignored.
    pub fn from_code(code: u8) -> Diag {
        match code & 0x1f {
            0 => Diag::NoDiagnostic,
            1 => Diag::ControlDetectionTimeExpired,
            2 => Diag::EchoFunctionFailed,
            3 => Diag::NeighborSignaledSessionDown,
            4 => Diag::ForwardingPlaneReset,
            5 => Diag::PathDown,
            6 => Diag::ConcatenatedPathDown,
            7 => Diag::AdministrativelyDown,
            8 => Diag::ReverseConcatenatedPathDown,
            c => Diag::Other(c),
        }
    }
}

/// Session states, IANA "BFD State" values (RFC 5880 §4.1):
///
/// ```text
/// 0 AdminDown   1 Down   2 Init   3 Up
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum State {
    /// 0: held down by the operator.
    AdminDown,
    /// 1: down, or not yet established.
    Down,
    /// 2: the neighbour is heard, waiting for it to hear us.
    Init,
    /// 3: both directions work.
    Up,
}

impl State {
    /// The 2-bit wire value.
    pub fn code(self) -> u8 {
        match self {
            State::AdminDown => 0,
            State::Down => 1,
            State::Init => 2,
            State::Up => 3,
        }
    }

    /// The state for a 2-bit value; higher bits are ignored.
    pub fn from_code(code: u8) -> State {
        match code & 0x3 {
            0 => State::AdminDown,
            1 => State::Down,
            2 => State::Init,
            _ => State::Up,
        }
    }

    /// Lower-case name as the console and logs show it.
    pub fn name(self) -> &'static str {
        match self {
            State::AdminDown => "admindown",
            State::Down => "down",
            State::Init => "init",
            State::Up => "up",
        }
    }
}

impl std::fmt::Display for State {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a received control packet was dropped (RFC 5880 §6.8.6, the checks that need no
/// session). `Copy` and indexable so the receive path counts drops without allocating.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Error)]
pub enum BfdDecodeError {
    /// Fewer than 24 octets arrived, so not even the mandatory section is there.
    #[error("bfd: datagram of {0} octets is shorter than the 24-octet mandatory section")]
    Truncated(usize),
    /// The version field is not 1.
    #[error("bfd: version {0}, only version 1 is supported")]
    BadVersion(u8),
    /// The length field is below 24 (or 26 with the A bit set).
    #[error("bfd: length field {0} is below the minimum")]
    LengthTooSmall(u8),
    /// The length field claims more octets than the datagram carries.
    #[error("bfd: length field {length} exceeds the {received} octets received")]
    LengthExceedsPayload {
        /// The length field.
        length: u8,
        /// Octets actually received.
        received: usize,
    },
    /// Detect Mult is zero.
    #[error("bfd: detect multiplier is zero")]
    ZeroDetectMult,
    /// The M bit is set (multipoint is not defined for point-to-point sessions).
    #[error("bfd: multipoint bit set")]
    Multipoint,
    /// My Discriminator is zero.
    #[error("bfd: my discriminator is zero")]
    ZeroMyDiscriminator,
    /// Your Discriminator is zero while the sender's state is Init or Up.
    #[error("bfd: your discriminator is zero in state {0}")]
    ZeroYourDiscriminator(State),
    /// The A bit is set but authentication is not configured (Sluice does not support it).
    #[error("bfd: authentication present but not configured")]
    AuthNotConfigured,
}

impl BfdDecodeError {
    /// Number of distinct reasons, the size of a counter array indexed by [`Self::index`].
    pub const COUNT: usize = 9;

    /// Names of the reasons in [`Self::index`] order, for metrics labels.
    pub const NAMES: [&'static str; Self::COUNT] = [
        "truncated",
        "bad_version",
        "length_too_small",
        "length_exceeds_payload",
        "zero_detect_mult",
        "multipoint",
        "zero_my_discriminator",
        "zero_your_discriminator",
        "auth_not_configured",
    ];

    /// A dense index in `0..COUNT`, one per variant whatever its payload.
    pub fn index(self) -> usize {
        match self {
            BfdDecodeError::Truncated(_) => 0,
            BfdDecodeError::BadVersion(_) => 1,
            BfdDecodeError::LengthTooSmall(_) => 2,
            BfdDecodeError::LengthExceedsPayload { .. } => 3,
            BfdDecodeError::ZeroDetectMult => 4,
            BfdDecodeError::Multipoint => 5,
            BfdDecodeError::ZeroMyDiscriminator => 6,
            BfdDecodeError::ZeroYourDiscriminator(_) => 7,
            BfdDecodeError::AuthNotConfigured => 8,
        }
    }
}

/// The BFD control packet, mandatory section (RFC 5880 §4.1). Intervals are in
/// microseconds, as on the wire.
///
/// ```text
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |Vers |  Diag   |Sta|P|F|C|A|D|M|  Detect Mult  |    Length     |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                       My Discriminator                        |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                      Your Discriminator                       |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                    Desired Min TX Interval                    |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                   Required Min RX Interval                    |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// |                 Required Min Echo RX Interval                 |
/// +-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+-+
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ControlPacket {
    /// Protocol version (3 bits); 1 for RFC 5880.
    pub version: u8,
    /// Why the sender's session last changed state.
    pub diag: Diag,
    /// The sender's session state.
    pub state: State,
    /// P: the sender asks for a parameter-change acknowledgement.
    pub poll: bool,
    /// F: the acknowledgement of a received P bit.
    pub final_: bool,
    /// C: the sender's BFD does not share fate with its control plane.
    pub control_plane_independent: bool,
    /// A: an authentication section follows (not supported here).
    pub auth_present: bool,
    /// D: the sender wants demand mode.
    pub demand: bool,
    /// M: reserved for multipoint, must be zero.
    pub multipoint: bool,
    /// Detection time multiplier.
    pub detect_mult: u8,
    /// The sender's discriminator for this session, nonzero.
    pub my_discriminator: u32,
    /// The receiver's discriminator as the sender knows it, or 0.
    pub your_discriminator: u32,
    /// The sender's desired minimum transmit interval, µs.
    pub desired_min_tx: u32,
    /// The minimum receive interval the sender supports, µs.
    pub required_min_rx: u32,
    /// The minimum echo receive interval the sender supports, µs (0: no echo).
    pub required_min_echo_rx: u32,
}

mod field {
    pub const VERS_DIAG: usize = 0;
    pub const FLAGS: usize = 1;
    pub const DETECT_MULT: usize = 2;
    pub const LENGTH: usize = 3;
    pub const MY_DISC: std::ops::Range<usize> = 4..8;
    pub const YOUR_DISC: std::ops::Range<usize> = 8..12;
    pub const DESIRED_TX: std::ops::Range<usize> = 12..16;
    pub const REQUIRED_RX: std::ops::Range<usize> = 16..20;
    pub const REQUIRED_ECHO_RX: std::ops::Range<usize> = 20..24;
}

const P: u8 = 0x20;
const F: u8 = 0x10;
const C: u8 = 0x08;
const A: u8 = 0x04;
const D: u8 = 0x02;
const M: u8 = 0x01;

fn be32(b: &[u8], r: std::ops::Range<usize>) -> u32 {
    let mut w = [0u8; 4];
    w.copy_from_slice(&b[r]);
    u32::from_be_bytes(w)
}

impl ControlPacket {
    /// Octets of the mandatory section, and of every packet this implementation sends.
    pub const LEN: usize = 24;

    /// Minimum length when the A bit is set: the mandatory section plus the 2-octet
    /// authentication header (RFC 5880 §6.8.6).
    pub const LEN_WITH_AUTH: usize = 26;

    /// Decodes a received datagram and applies the packet-only checks of RFC 5880 §6.8.6,
    /// in the RFC's order. Octets beyond the length field are ignored, as the RFC allows.
    pub fn decode(buf: &[u8]) -> Result<ControlPacket, BfdDecodeError> {
        if buf.len() < Self::LEN {
            // The version is checked first even on a short datagram when it can be read,
            // so a BFD-v0 sender is counted as a version problem, not as truncation.
            if let Some(b) = buf.first()
                && b >> 5 != 1
            {
                return Err(BfdDecodeError::BadVersion(b >> 5));
            }
            return Err(BfdDecodeError::Truncated(buf.len()));
        }
        let flags = buf[field::FLAGS];
        let length = buf[field::LENGTH];
        let pkt = ControlPacket {
            version: buf[field::VERS_DIAG] >> 5,
            diag: Diag::from_code(buf[field::VERS_DIAG]),
            state: State::from_code(flags >> 6),
            poll: flags & P != 0,
            final_: flags & F != 0,
            control_plane_independent: flags & C != 0,
            auth_present: flags & A != 0,
            demand: flags & D != 0,
            multipoint: flags & M != 0,
            detect_mult: buf[field::DETECT_MULT],
            my_discriminator: be32(buf, field::MY_DISC),
            your_discriminator: be32(buf, field::YOUR_DISC),
            desired_min_tx: be32(buf, field::DESIRED_TX),
            required_min_rx: be32(buf, field::REQUIRED_RX),
            required_min_echo_rx: be32(buf, field::REQUIRED_ECHO_RX),
        };
        if pkt.version != 1 {
            return Err(BfdDecodeError::BadVersion(pkt.version));
        }
        let min = if pkt.auth_present {
            Self::LEN_WITH_AUTH
        } else {
            Self::LEN
        };
        if usize::from(length) < min {
            return Err(BfdDecodeError::LengthTooSmall(length));
        }
        if usize::from(length) > buf.len() {
            return Err(BfdDecodeError::LengthExceedsPayload {
                length,
                received: buf.len(),
            });
        }
        pkt.validate()?;
        Ok(pkt)
    }

    /// The field checks of RFC 5880 §6.8.6 (everything but version and length), also used
    /// by the session on packets built in memory.
    pub fn validate(&self) -> Result<(), BfdDecodeError> {
        if self.version != 1 {
            return Err(BfdDecodeError::BadVersion(self.version));
        }
        if self.detect_mult == 0 {
            return Err(BfdDecodeError::ZeroDetectMult);
        }
        if self.multipoint {
            return Err(BfdDecodeError::Multipoint);
        }
        if self.my_discriminator == 0 {
            return Err(BfdDecodeError::ZeroMyDiscriminator);
        }
        if self.your_discriminator == 0 && !matches!(self.state, State::Down | State::AdminDown) {
            return Err(BfdDecodeError::ZeroYourDiscriminator(self.state));
        }
        if self.auth_present {
            return Err(BfdDecodeError::AuthNotConfigured);
        }
        Ok(())
    }

    /// Writes the 24-octet mandatory section (length field 24) into `buf` and returns the
    /// number of octets written. Fields are masked to their wire width; a packet with
    /// `auth_present` set is written as is, without an authentication section.
    ///
    /// # Panics
    /// If `buf` is shorter than [`ControlPacket::LEN`]: the sender owns that buffer, so a
    /// short one is a bug, not bad input.
    pub fn encode(&self, buf: &mut [u8]) -> usize {
        assert!(
            buf.len() >= Self::LEN,
            "bfd encode buffer of {} octets, need {}",
            buf.len(),
            Self::LEN
        );
        buf[field::VERS_DIAG] = (self.version & 0x7) << 5 | self.diag.code();
        let mut flags = self.state.code() << 6;
        for (set, bit) in [
            (self.poll, P),
            (self.final_, F),
            (self.control_plane_independent, C),
            (self.auth_present, A),
            (self.demand, D),
            (self.multipoint, M),
        ] {
            if set {
                flags |= bit;
            }
        }
        buf[field::FLAGS] = flags;
        buf[field::DETECT_MULT] = self.detect_mult;
        buf[field::LENGTH] = Self::LEN as u8;
        buf[field::MY_DISC].copy_from_slice(&self.my_discriminator.to_be_bytes());
        buf[field::YOUR_DISC].copy_from_slice(&self.your_discriminator.to_be_bytes());
        buf[field::DESIRED_TX].copy_from_slice(&self.desired_min_tx.to_be_bytes());
        buf[field::REQUIRED_RX].copy_from_slice(&self.required_min_rx.to_be_bytes());
        buf[field::REQUIRED_ECHO_RX].copy_from_slice(&self.required_min_echo_rx.to_be_bytes());
        Self::LEN
    }
}
