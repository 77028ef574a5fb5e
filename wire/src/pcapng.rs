//! pcapng capture files (draft-ietf-opsawg-pcapng), written and read back.
//!
//! `sluice capture` hands the operator the frames of a VIP as the appliance saw them at each
//! stage (what XDP received and sent, what the engine received and sent), in a file tcpdump,
//! tshark and Wireshark open as they are. pcapng rather than pcap because one file holds
//! several interfaces (one per stage and direction, each with its name), nanosecond
//! timestamps, a comment per packet and each interface's drop count.
//!
//! The [`Writer`] makes one little-endian section: a Section Header Block, an Interface
//! Description Block per interface, an Enhanced Packet Block per frame and, from
//! [`Writer::finish`], an Interface Statistics Block per interface. [`read`] reads such files
//! back (the console shows a capture's packets, tests check what the appliance wrote); it
//! refuses what it does not understand, big-endian sections and more than one section
//! included, with an error that says so, and checks every length before using it, so hostile
//! bytes give an error, never a panic.

use core::fmt;
use std::io::{self, Write};

/// LINKTYPE_ETHERNET: every interface this module writes or reads carries Ethernet frames.
pub const LINKTYPE_ETHERNET: u16 = 1;
/// What the Section Header Block's `shb_userappl` option names as the writer.
pub const USER_APPL: &str = "sluice";
/// The `if_tsresol` the writer gives every interface: 10^-9 s, nanoseconds.
pub const TSRESOL_NS: u8 = 9;

/// Block types (draft-ietf-opsawg-pcapng section 10.1, "Block Type Codes").
mod block {
    /// Section Header Block.
    pub(super) const SHB: u32 = 0x0A0D_0D0A;
    /// Interface Description Block.
    pub(super) const IDB: u32 = 0x0000_0001;
    /// Packet Block (obsolete).
    pub(super) const PB: u32 = 0x0000_0002;
    /// Simple Packet Block.
    pub(super) const SPB: u32 = 0x0000_0003;
    /// Interface Statistics Block.
    pub(super) const ISB: u32 = 0x0000_0005;
    /// Enhanced Packet Block.
    pub(super) const EPB: u32 = 0x0000_0006;
    /// The Section Header Block's byte-order magic, as the writer's byte order stores it.
    pub(super) const BYTE_ORDER_MAGIC: u32 = 0x1A2B_3C4D;
    /// The same magic read from a big-endian section with little-endian eyes.
    pub(super) const BYTE_ORDER_MAGIC_SWAPPED: u32 = 0x4D3C_2B1A;
}

/// Option codes (draft-ietf-opsawg-pcapng sections 3.5, 4.1, 4.2, 4.6).
mod opt {
    /// opt_endofopt: ends an option list.
    pub(super) const END: u16 = 0;
    /// opt_comment: UTF-8 text, in any block.
    pub(super) const COMMENT: u16 = 1;
    /// shb_userappl: the application that wrote the section.
    pub(super) const SHB_USERAPPL: u16 = 4;
    /// if_name: the interface's name.
    pub(super) const IF_NAME: u16 = 2;
    /// if_description: the interface's description.
    pub(super) const IF_DESCRIPTION: u16 = 3;
    /// if_tsresol: the timestamp unit, 10^-N s (or 2^-N with the top bit set).
    pub(super) const IF_TSRESOL: u16 = 9;
    /// isb_ifdrop: packets the interface dropped, 64 bits.
    pub(super) const ISB_IFDROP: u16 = 5;
}

/// One interface of a capture: in Sluice, one stage and direction ("xdp-in", "engine-out").
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Interface {
    /// `if_name`.
    pub name: String,
    /// `if_description` (not written when empty).
    pub description: String,
    /// Bytes kept of each frame; 0 means no limit (the pcapng convention).
    pub snaplen: u32,
}

/// One captured frame.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    /// Index into [`Capture::interfaces`].
    pub interface: u32,
    /// When it was captured, nanoseconds since the Unix epoch.
    pub ts_unix_ns: u64,
    /// Its length on the wire (`data` may be shorter: the snap length cut it).
    pub orig_len: u32,
    /// The bytes captured, an Ethernet frame from its first byte.
    pub data: Vec<u8>,
    /// `opt_comment`.
    pub comment: Option<String>,
}

/// What [`read`] found in a file.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Capture {
    /// In the order of their Interface Description Blocks (a packet's `interface` indexes it).
    pub interfaces: Vec<Interface>,
    /// In file order.
    pub packets: Vec<Packet>,
    /// `(interface, isb_ifdrop)` of every Interface Statistics Block that carries one.
    pub drops: Vec<(u32, u64)>,
}

/// Why [`read`] refused a file. Offsets are bytes from the start of the file to the block
/// (or option) at fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PcapngError {
    /// The file does not start with a Section Header Block (a classic pcap file, say).
    NotPcapng,
    /// The section is big-endian; only little-endian sections (what [`Writer`] makes) are read.
    BigEndian,
    /// The section's version is not 1.x.
    Version { major: u16, minor: u16 },
    /// The file ends inside the block at `offset`.
    Truncated { offset: usize },
    /// A block's length is below 12, not a multiple of 4, or differs from its trailing copy.
    BlockLength { offset: usize, length: u32 },
    /// A block is too short for its fixed fields, or its captured data runs past its end.
    BlockBody { offset: usize, block_type: u32 },
    /// An option runs past the end of its block, or has the wrong length for its code.
    BadOption { offset: usize, code: u16 },
    /// A second Section Header Block: only single-section files are read.
    SecondSection { offset: usize },
    /// A Packet Block or Simple Packet Block: skipping it would lose packets unseen.
    UnsupportedBlock { offset: usize, block_type: u32 },
    /// A block names an interface no Interface Description Block described before it.
    UnknownInterface { offset: usize, interface: u32 },
    /// An interface whose link type is not Ethernet.
    LinkType { interface: u32, link_type: u16 },
    /// An interface whose `if_tsresol` is a power of two or finer than 10^-18 s.
    TsResol { interface: u32, value: u8 },
    /// A timestamp beyond 2^64 ns after the epoch (the year 2554).
    Timestamp { offset: usize },
}

impl fmt::Display for PcapngError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            PcapngError::NotPcapng => {
                f.write_str("not a pcapng file: it does not start with a Section Header Block")
            }
            PcapngError::BigEndian => {
                f.write_str("pcapng: big-endian sections are not supported, only little-endian")
            }
            PcapngError::Version { major, minor } => {
                write!(
                    f,
                    "pcapng: version {major}.{minor} is not supported, only 1.x"
                )
            }
            PcapngError::Truncated { offset } => {
                write!(f, "pcapng: the file ends inside the block at byte {offset}")
            }
            PcapngError::BlockLength { offset, length } => write!(
                f,
                "pcapng: the block at byte {offset} has a bad length {length} (below 12, not a \
                 multiple of 4, or not the same at both ends)"
            ),
            PcapngError::BlockBody { offset, block_type } => write!(
                f,
                "pcapng: the block at byte {offset} (type {block_type:#x}) is too short for its \
                 fields"
            ),
            PcapngError::BadOption { offset, code } => write!(
                f,
                "pcapng: option {code} at byte {offset} runs past its block or has the wrong \
                 length"
            ),
            PcapngError::SecondSection { offset } => write!(
                f,
                "pcapng: a second section starts at byte {offset}; only one is supported"
            ),
            PcapngError::UnsupportedBlock { offset, block_type } => write!(
                f,
                "pcapng: the block at byte {offset} (type {block_type:#x}) is a packet block \
                 this reader does not support (only Enhanced Packet Blocks)"
            ),
            PcapngError::UnknownInterface { offset, interface } => write!(
                f,
                "pcapng: the block at byte {offset} names interface {interface}, which no \
                 Interface Description Block described"
            ),
            PcapngError::LinkType {
                interface,
                link_type,
            } => write!(
                f,
                "pcapng: interface {interface} has link type {link_type}, not Ethernet (1)"
            ),
            PcapngError::TsResol { interface, value } => write!(
                f,
                "pcapng: interface {interface} has if_tsresol {value:#x}, not a power of ten \
                 up to 10^-18"
            ),
            PcapngError::Timestamp { offset } => write!(
                f,
                "pcapng: the timestamp of the block at byte {offset} is too far in the future"
            ),
        }
    }
}

impl std::error::Error for PcapngError {}

/// Writes one pcapng section into `W`: the header and interfaces at [`Writer::new`], a block
/// per [`Writer::write_packet`], the statistics at [`Writer::finish`]. Each block goes out in
/// one `write_all`, so a `BufWriter` is only worth it for many small packets.
#[derive(Debug)]
pub struct Writer<W: Write> {
    out: W,
    snaplens: Vec<u32>,
}

impl<W: Write> Writer<W> {
    /// Writes the Section Header Block (`shb_userappl` [`USER_APPL`]) and an Interface
    /// Description Block per interface (Ethernet, nanosecond timestamps, `if_name`,
    /// `if_description` when not empty). Packets name an interface by its index here.
    pub fn new(mut out: W, interfaces: &[Interface]) -> io::Result<Writer<W>> {
        out.write_all(&section_header()?)?;
        for i in interfaces {
            out.write_all(&interface_description(i)?)?;
        }
        Ok(Writer {
            out,
            snaplens: interfaces.iter().map(|i| i.snaplen).collect(),
        })
    }

    /// Writes an Enhanced Packet Block. `data` beyond the interface's snap length is not
    /// written; `orig_len` is raised to the bytes written when it is smaller (a frame is never
    /// shorter than what was captured of it). An interface index out of range, or a frame or
    /// comment too long for the format, is [`io::ErrorKind::InvalidInput`].
    pub fn write_packet(
        &mut self,
        interface: u32,
        ts_unix_ns: u64,
        orig_len: u32,
        data: &[u8],
        comment: Option<&str>,
    ) -> io::Result<()> {
        let snaplen = self.snaplen(interface)?;
        let kept = match snaplen {
            0 => data,
            n => &data[..data.len().min(n as usize)],
        };
        let captured = u32::try_from(kept.len()).map_err(|_| invalid("frame over 4 GiB"))?;
        let mut b = BlockBuf::new(block::EPB);
        b.u32(interface);
        b.timestamp(ts_unix_ns);
        b.u32(captured);
        b.u32(orig_len.max(captured));
        b.padded(kept);
        if let Some(c) = comment {
            b.option(opt::COMMENT, c.as_bytes())?;
        }
        self.out.write_all(&b.finish()?)
    }

    /// Writes an Interface Statistics Block per interface, stamped `ts_unix_ns`, carrying
    /// `isb_ifdrop` for the interfaces `drops` names (`(interface, frames dropped)`), and
    /// hands back the output. An interface out of range in `drops` is
    /// [`io::ErrorKind::InvalidInput`].
    pub fn finish(mut self, drops: &[(u32, u64)], ts_unix_ns: u64) -> io::Result<W> {
        for &(interface, _) in drops {
            self.snaplen(interface)?;
        }
        for interface in 0..self.snaplens.len() as u32 {
            let mut b = BlockBuf::new(block::ISB);
            b.u32(interface);
            b.timestamp(ts_unix_ns);
            for &(_, dropped) in drops.iter().filter(|(i, _)| *i == interface) {
                b.option(opt::ISB_IFDROP, &dropped.to_le_bytes())?;
            }
            self.out.write_all(&b.finish()?)?;
        }
        self.out.flush()?;
        Ok(self.out)
    }

    fn snaplen(&self, interface: u32) -> io::Result<u32> {
        self.snaplens
            .get(interface as usize)
            .copied()
            .ok_or_else(|| invalid("no such pcapng interface"))
    }
}

fn invalid(what: &'static str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, what)
}

/// Section Header Block (section 4.1):
/// ```text
///  0                   1                   2                   3
///  0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1 2 3 4 5 6 7 8 9 0 1
/// +---------------------------------------------------------------+
/// |                   Block Type = 0x0A0D0D0A                     |
/// +---------------------------------------------------------------+
/// |                      Block Total Length                       |
/// +---------------------------------------------------------------+
/// |                      Byte-Order Magic                         |
/// +---------------------------------------------------------------+
/// |          Major Version        |         Minor Version         |
/// +---------------------------------------------------------------+
/// |                                                               |
/// |                          Section Length                       |
/// +---------------------------------------------------------------+
/// /                      Options (variable)                       /
/// +---------------------------------------------------------------+
/// |                      Block Total Length                       |
/// +---------------------------------------------------------------+
/// ```
fn section_header() -> io::Result<Vec<u8>> {
    let mut b = BlockBuf::new(block::SHB);
    b.u32(block::BYTE_ORDER_MAGIC);
    b.u16(1);
    b.u16(0);
    // Section length -1: not given (the writer streams).
    b.bytes(&(-1i64).to_le_bytes());
    b.option(opt::SHB_USERAPPL, USER_APPL.as_bytes())?;
    b.finish()
}

/// Interface Description Block (section 4.2):
/// ```text
/// +---------------------------------------------------------------+
/// |                    Block Type = 0x00000001                    |
/// +---------------------------------------------------------------+
/// |                      Block Total Length                       |
/// +---------------------------------------------------------------+
/// |           LinkType            |           Reserved            |
/// +---------------------------------------------------------------+
/// |                            SnapLen                            |
/// +---------------------------------------------------------------+
/// /                      Options (variable)                       /
/// +---------------------------------------------------------------+
/// |                      Block Total Length                       |
/// +---------------------------------------------------------------+
/// ```
fn interface_description(i: &Interface) -> io::Result<Vec<u8>> {
    let mut b = BlockBuf::new(block::IDB);
    b.u16(LINKTYPE_ETHERNET);
    b.u16(0);
    b.u32(i.snaplen);
    b.option(opt::IF_NAME, i.name.as_bytes())?;
    if !i.description.is_empty() {
        b.option(opt::IF_DESCRIPTION, i.description.as_bytes())?;
    }
    b.option(opt::IF_TSRESOL, &[TSRESOL_NS])?;
    b.finish()
}

// Enhanced Packet Block (section 4.3): Interface ID, Timestamp (Upper), Timestamp (Lower),
// Captured Packet Length, Original Packet Length (32 bits each), the packet data padded to
// 32 bits, options. Interface Statistics Block (section 4.6): Interface ID, Timestamp
// (Upper), Timestamp (Lower), options. Both between Block Type and the trailing Block Total
// Length like every block.

/// One block being built: type, a length filled in by `finish`, the body, options, the
/// length again. Little-endian throughout.
struct BlockBuf {
    buf: Vec<u8>,
    options: bool,
}

impl BlockBuf {
    fn new(block_type: u32) -> BlockBuf {
        let mut buf = Vec::with_capacity(64);
        buf.extend_from_slice(&block_type.to_le_bytes());
        buf.extend_from_slice(&0u32.to_le_bytes());
        BlockBuf {
            buf,
            options: false,
        }
    }

    fn u16(&mut self, v: u16) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }

    fn bytes(&mut self, v: &[u8]) {
        self.buf.extend_from_slice(v);
    }

    /// `v` and zeros up to the next multiple of 4.
    fn padded(&mut self, v: &[u8]) {
        self.buf.extend_from_slice(v);
        self.buf.resize(self.buf.len() + pad(v.len()), 0);
    }

    /// The high 32 bits, then the low 32 bits, in if_tsresol units (nanoseconds).
    fn timestamp(&mut self, ns: u64) {
        self.u32((ns >> 32) as u32);
        self.u32(ns as u32);
    }

    fn option(&mut self, code: u16, value: &[u8]) -> io::Result<()> {
        let len = u16::try_from(value.len()).map_err(|_| invalid("pcapng option over 64 KiB"))?;
        self.u16(code);
        self.u16(len);
        self.padded(value);
        self.options = true;
        Ok(())
    }

    fn finish(mut self) -> io::Result<Vec<u8>> {
        if self.options {
            self.u16(opt::END);
            self.u16(0);
        }
        let total =
            u32::try_from(self.buf.len() + 4).map_err(|_| invalid("pcapng block over 4 GiB"))?;
        self.buf[4..8].copy_from_slice(&total.to_le_bytes());
        self.u32(total);
        Ok(self.buf)
    }
}

/// Padding after `len` bytes to a 32-bit boundary.
fn pad(len: usize) -> usize {
    (4 - len % 4) % 4
}

/// Reads a single-section, little-endian pcapng file of Ethernet interfaces: interfaces,
/// Enhanced Packet Blocks and the drop counts of Interface Statistics Blocks; other blocks
/// (name resolution, custom, ...) are skipped. Timestamps are converted to nanoseconds
/// whatever decimal `if_tsresol` an interface has. Names and comments that are not UTF-8 are
/// read lossily.
pub fn read(bytes: &[u8]) -> Result<Capture, PcapngError> {
    let mut reader = Reader {
        capture: Capture::default(),
        tsresol: Vec::new(),
    };
    let mut offset = 0;
    // An empty file is not a pcapng file either: the first block is read whatever the length.
    loop {
        let (block_type, body, next) = next_block(bytes, offset)?;
        match block_type {
            block::SHB if offset == 0 => section(body, offset)?,
            block::SHB => return Err(PcapngError::SecondSection { offset }),
            block::IDB => reader.interface(body, offset)?,
            block::EPB => reader.packet(body, offset)?,
            block::ISB => reader.statistics(body, offset)?,
            block::PB | block::SPB => {
                return Err(PcapngError::UnsupportedBlock { offset, block_type });
            }
            _ => {}
        }
        offset = next;
        if offset == bytes.len() {
            return Ok(reader.capture);
        }
    }
}

/// The block at `offset`: its type, its body (between the length and the trailing length)
/// and where the next block starts. The first block must be a little-endian Section Header
/// Block; its magic is checked before its length is trusted.
fn next_block(bytes: &[u8], offset: usize) -> Result<(u32, &[u8], usize), PcapngError> {
    let word = |at: usize| le32(bytes, offset + at);
    if offset == 0 {
        let shb = block::SHB.to_le_bytes();
        if !bytes.starts_with(&shb[..bytes.len().min(4)]) {
            return Err(PcapngError::NotPcapng);
        }
        match word(8) {
            Some(block::BYTE_ORDER_MAGIC) => {}
            Some(block::BYTE_ORDER_MAGIC_SWAPPED) => return Err(PcapngError::BigEndian),
            Some(_) => return Err(PcapngError::NotPcapng),
            None => return Err(PcapngError::Truncated { offset }),
        }
    }
    let (Some(block_type), Some(length)) = (word(0), word(4)) else {
        return Err(PcapngError::Truncated { offset });
    };
    let len = length as usize;
    if len < 12 || !len.is_multiple_of(4) {
        return Err(PcapngError::BlockLength { offset, length });
    }
    let Some(end) = offset.checked_add(len).filter(|&end| end <= bytes.len()) else {
        return Err(PcapngError::Truncated { offset });
    };
    if le32(bytes, end - 4) != Some(length) {
        return Err(PcapngError::BlockLength { offset, length });
    }
    Ok((block_type, &bytes[offset + 8..end - 4], end))
}

/// The Section Header Block's fixed fields: version 1.x (the magic was checked already).
fn section(body: &[u8], offset: usize) -> Result<(), PcapngError> {
    let (Some(major), Some(minor), Some(opts)) = (le16(body, 4), le16(body, 6), body.get(16..))
    else {
        return Err(PcapngError::BlockBody {
            offset,
            block_type: block::SHB,
        });
    };
    if major != 1 {
        return Err(PcapngError::Version { major, minor });
    }
    // Options (shb_userappl and the like) say nothing the reader needs, but must be sound.
    options(opts, offset + 8 + 16)?;
    Ok(())
}

struct Reader {
    capture: Capture,
    /// Per interface: nanoseconds per `if_tsresol` unit, or units per nanosecond.
    tsresol: Vec<Scale>,
}

/// How an interface's timestamp units convert to nanoseconds.
#[derive(Clone, Copy)]
enum Scale {
    Mul(u64),
    Div(u64),
}

impl Reader {
    fn interface(&mut self, body: &[u8], offset: usize) -> Result<(), PcapngError> {
        let interface = self.capture.interfaces.len() as u32;
        let (Some(link_type), Some(snaplen)) = (le16(body, 0), le32(body, 4)) else {
            return Err(PcapngError::BlockBody {
                offset,
                block_type: block::IDB,
            });
        };
        if link_type != LINKTYPE_ETHERNET {
            return Err(PcapngError::LinkType {
                interface,
                link_type,
            });
        }
        let mut found = Interface {
            snaplen,
            ..Interface::default()
        };
        // The pcapng default: microseconds.
        let mut resol = 6u8;
        for o in options(&body[8..], offset + 16)? {
            match o.code {
                opt::IF_NAME => found.name = String::from_utf8_lossy(o.value).into_owned(),
                opt::IF_DESCRIPTION => {
                    found.description = String::from_utf8_lossy(o.value).into_owned()
                }
                opt::IF_TSRESOL => match o.value {
                    [v] => resol = *v,
                    _ => {
                        return Err(PcapngError::BadOption {
                            offset: o.offset,
                            code: o.code,
                        });
                    }
                },
                _ => {}
            }
        }
        let scale = match resol {
            0..=9 => Scale::Mul(10u64.pow(u32::from(9 - resol))),
            10..=18 => Scale::Div(10u64.pow(u32::from(resol - 9))),
            value => return Err(PcapngError::TsResol { interface, value }),
        };
        self.tsresol.push(scale);
        self.capture.interfaces.push(found);
        Ok(())
    }

    /// The interface id and timestamp that start an EPB and an ISB, the timestamp in ns.
    fn stamp(
        &self,
        body: &[u8],
        offset: usize,
        block_type: u32,
    ) -> Result<(u32, u64), PcapngError> {
        let (Some(interface), Some(high), Some(low)) =
            (le32(body, 0), le32(body, 4), le32(body, 8))
        else {
            return Err(PcapngError::BlockBody { offset, block_type });
        };
        let Some(&scale) = self.tsresol.get(interface as usize) else {
            return Err(PcapngError::UnknownInterface { offset, interface });
        };
        let units = (u64::from(high) << 32) | u64::from(low);
        let ns = match scale {
            Scale::Mul(m) => units.checked_mul(m),
            Scale::Div(d) => Some(units / d),
        };
        ns.map(|ns| (interface, ns))
            .ok_or(PcapngError::Timestamp { offset })
    }

    fn packet(&mut self, body: &[u8], offset: usize) -> Result<(), PcapngError> {
        let bad = PcapngError::BlockBody {
            offset,
            block_type: block::EPB,
        };
        let (interface, ts_unix_ns) = self.stamp(body, offset, block::EPB)?;
        let (Some(captured), Some(orig_len)) = (le32(body, 12), le32(body, 16)) else {
            return Err(bad);
        };
        let captured = captured as usize;
        let data_end = captured
            .checked_add(pad(captured))
            .and_then(|n| n.checked_add(20))
            .filter(|&end| end <= body.len())
            .ok_or(bad)?;
        let mut comment = None;
        for o in options(&body[data_end..], offset + 8 + data_end)? {
            if o.code == opt::COMMENT {
                comment = Some(String::from_utf8_lossy(o.value).into_owned());
            }
        }
        self.capture.packets.push(Packet {
            interface,
            ts_unix_ns,
            orig_len,
            data: body[20..20 + captured].to_vec(),
            comment,
        });
        Ok(())
    }

    fn statistics(&mut self, body: &[u8], offset: usize) -> Result<(), PcapngError> {
        let (interface, _) = self.stamp(body, offset, block::ISB)?;
        for o in options(&body[12..], offset + 8 + 12)? {
            if o.code == opt::ISB_IFDROP {
                let v: [u8; 8] = o.value.try_into().map_err(|_| PcapngError::BadOption {
                    offset: o.offset,
                    code: o.code,
                })?;
                self.capture.drops.push((interface, u64::from_le_bytes(v)));
            }
        }
        Ok(())
    }
}

/// One option of a block: its code, its value (without padding), its offset in the file.
struct Opt<'a> {
    code: u16,
    value: &'a [u8],
    offset: usize,
}

/// The options in `bytes` (which start at file offset `at`), up to opt_endofopt or the end of
/// the block, whichever comes first.
fn options(bytes: &[u8], at: usize) -> Result<Vec<Opt<'_>>, PcapngError> {
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let (Some(code), Some(len)) = (le16(bytes, i), le16(bytes, i + 2)) else {
            return Err(PcapngError::BadOption {
                offset: at + i,
                code: le16(bytes, i).unwrap_or(0),
            });
        };
        if code == opt::END {
            break;
        }
        let len = usize::from(len);
        let Some(value) = bytes.get(i + 4..i + 4 + len) else {
            return Err(PcapngError::BadOption {
                offset: at + i,
                code,
            });
        };
        out.push(Opt {
            code,
            value,
            offset: at + i,
        });
        i += 4 + len + pad(len);
    }
    Ok(out)
}

fn le16(b: &[u8], at: usize) -> Option<u16> {
    let s = b.get(at..at.checked_add(2)?)?;
    Some(u16::from_le_bytes([s[0], s[1]]))
}

fn le32(b: &[u8], at: usize) -> Option<u32> {
    let s = b.get(at..at.checked_add(4)?)?;
    Some(u32::from_le_bytes([s[0], s[1], s[2], s[3]]))
}

#[cfg(test)]
#[path = "pcapng_tests.rs"]
mod tests;
