//! Where a TCP flow's sequence spaces stand, as far as the mode sees them: what each side
//! sent last and what it acknowledged last. NAT and FullNAT see both directions; DR and
//! tunnel only the client's. A FIN or RST moves a flow's state only when it lands where
//! its sender's sequence space says it must (RFC 5961 3.2): an off-path spoofer, who
//! cannot see the traffic, would have to guess a number in 2^32.

/// A flow's sequence bookkeeping. All values are in the sender's own sequence space as
/// it appears on the wire on its side of the appliance.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Track {
    /// The client's next sequence number: the highest `seq + len` of its segments (a SYN
    /// and a FIN count one).
    pub client_next: u32,
    /// The highest acknowledgement number the client sent (the backend's space).
    pub client_acked: u32,
    /// The backend's next sequence number (NAT and FullNAT).
    pub backend_next: u32,
    /// The highest acknowledgement number the backend sent (the client's space as the
    /// backend sees it).
    pub backend_acked: u32,
    /// [`seen`] bits: which of the four are known, and which side sent a FIN.
    pub seen: u8,
}

/// [`Track::seen`] bits.
pub mod seen {
    /// `client_next` is known (the client's SYN passed).
    pub const CLIENT: u8 = 0x01;
    /// `client_acked` is known.
    pub const CLIENT_ACK: u8 = 0x02;
    /// `backend_next` is known (the backend's SYN-ACK passed).
    pub const BACKEND: u8 = 0x04;
    /// `backend_acked` is known.
    pub const BACKEND_ACK: u8 = 0x08;
    /// The client sent a FIN that was in its window.
    pub const CLIENT_FIN: u8 = 0x10;
    /// The backend sent a FIN that was in its window.
    pub const BACKEND_FIN: u8 = 0x20;
    /// An RST that was in its sender's window passed.
    pub const RESET: u8 = 0x40;
    /// Every bit defined so far (a record with others is from a newer writer).
    pub const ALL: u8 = 0x7f;
}
