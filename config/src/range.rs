//! A range of ports: the outbound ports a VIP's backends share, in the model and in the
//! tables built from it.

/// An inclusive range of ports (`first..=last`, `first <= last`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PortRange {
    /// First port of the range.
    pub first: u16,
    /// Last port of the range (inclusive).
    pub last: u16,
}

impl PortRange {
    /// `first..=last`; `None` when `first > last`.
    pub fn new(first: u16, last: u16) -> Option<PortRange> {
        (first <= last).then_some(PortRange { first, last })
    }

    /// Number of ports.
    pub fn len(&self) -> u32 {
        u32::from(self.last) - u32::from(self.first) + 1
    }

    /// Never true: a range holds at least one port (here for clippy's `len` rule).
    pub fn is_empty(&self) -> bool {
        false
    }

    /// Whether `port` is in the range.
    pub fn contains(&self, port: u16) -> bool {
        (self.first..=self.last).contains(&port)
    }

    /// The ports both ranges hold, if any.
    pub fn intersect(&self, other: &PortRange) -> Option<PortRange> {
        PortRange::new(self.first.max(other.first), self.last.min(other.last))
    }
}

impl std::fmt::Display for PortRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}
