//! The frame the packet core rewrites: a packet inside a buffer with room on both sides.
//!
//! The datapath hands each received UMEM chunk to [`super::process`] as a `Frame`: the packet
//! sits at `buf[start..start + len]`, with [`HEADROOM`](super::HEADROOM) bytes in front so a
//! tunnel header can be pushed without copying, and the rest of the chunk behind it. The core
//! rewrites in place and moves the bounds; the worker transmits `start..start + len`.

/// Why a [`Frame`] refused to change its bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameError {
    /// Not enough headroom in front of the packet.
    NoHeadroom,
    /// Not enough tailroom behind the packet.
    NoTailroom,
    /// The packet is shorter than the bytes to remove.
    TooShort,
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FrameError::NoHeadroom => "not enough headroom in front of the packet",
            FrameError::NoTailroom => "not enough tailroom behind the packet",
            FrameError::TooShort => "packet shorter than the bytes to remove",
        })
    }
}

impl std::error::Error for FrameError {}

/// A packet inside a buffer with room on both sides: `buf[start..start + len]` is the frame.
#[derive(Debug)]
pub struct Frame<'a> {
    buf: &'a mut [u8],
    start: usize,
    len: usize,
    /// Interface the frame arrived on.
    pub ifindex: u32,
}

impl<'a> Frame<'a> {
    /// A frame of `len` bytes at `start` inside `buf` that arrived on `ifindex`; `None`
    /// when it does not fit.
    pub fn new(buf: &'a mut [u8], start: usize, len: usize, ifindex: u32) -> Option<Self> {
        let end = start.checked_add(len)?;
        (end <= buf.len()).then_some(Frame {
            buf,
            start,
            len,
            ifindex,
        })
    }

    /// The frame's bytes.
    pub fn data(&self) -> &[u8] {
        &self.buf[self.start..self.start + self.len]
    }

    /// The frame's bytes, writable.
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..self.start + self.len]
    }

    /// Length of the frame in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length frame.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes available in front of the frame.
    pub fn headroom(&self) -> usize {
        self.start
    }

    /// Bytes available behind the frame.
    pub fn tailroom(&self) -> usize {
        self.buf.len() - self.start - self.len
    }

    /// Offset of the frame inside the underlying buffer (the headroom left in front).
    pub fn start(&self) -> usize {
        self.start
    }

    /// Bytes from the frame's start to the end of the buffer (room to grow it into).
    pub fn capacity(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Grows the frame by `n` bytes at the front (for an outer header) and returns the
    /// whole frame; the new bytes hold whatever the buffer held before.
    pub fn push_front(&mut self, n: usize) -> Result<&mut [u8], FrameError> {
        if n > self.start {
            return Err(FrameError::NoHeadroom);
        }
        self.start -= n;
        self.len += n;
        Ok(self.data_mut())
    }

    /// Removes `n` bytes from the front (decapsulation, or stripping a VLAN tag after
    /// moving the Ethernet addresses).
    pub fn pull_front(&mut self, n: usize) -> Result<(), FrameError> {
        if n > self.len {
            return Err(FrameError::TooShort);
        }
        self.start += n;
        self.len -= n;
        Ok(())
    }

    /// Sets the frame length, growing into the tailroom or truncating.
    pub fn set_len(&mut self, len: usize) -> Result<(), FrameError> {
        if self.start + len > self.buf.len() {
            return Err(FrameError::NoTailroom);
        }
        self.len = len;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_and_pull_move_the_start_within_bounds() {
        let mut buf = [0xa5u8; 64];
        let mut f = Frame::new(&mut buf, 16, 32, 1).expect("fits");
        assert_eq!((f.headroom(), f.len(), f.tailroom()), (16, 32, 16));
        f.push_front(8).expect("room")[..8].fill(1);
        assert_eq!((f.headroom(), f.len()), (8, 40));
        assert_eq!(f.push_front(9), Err(FrameError::NoHeadroom));
        f.pull_front(10).expect("long enough");
        assert_eq!((f.start(), f.len()), (18, 30));
        assert_eq!(f.pull_front(31), Err(FrameError::TooShort));
        assert_eq!(f.set_len(47), Err(FrameError::NoTailroom));
        f.set_len(46).expect("fits");
        assert_eq!(f.tailroom(), 0);
        assert_eq!(buf[8..18], [1, 1, 1, 1, 1, 1, 1, 1, 0xa5, 0xa5]);
    }

    #[test]
    fn a_frame_that_does_not_fit_is_refused() {
        let mut buf = [0u8; 10];
        assert!(Frame::new(&mut buf, 4, 7, 1).is_none());
        assert!(Frame::new(&mut buf, usize::MAX, 2, 1).is_none());
        assert!(Frame::new(&mut buf, 4, 6, 1).is_some());
    }
}
