//! The pcapng writer and reader: exact bytes of each block, round trips, hostile input
//! (every prefix, every byte flipped, random bytes) and the real readers, tcpdump and tshark,
//! opening what the writer made.

use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::Command;

use proptest::prelude::*;

use super::*;
use crate::tcp::flags;
use crate::{EtherType, EthernetRepr, FrameRepr, IpProtocol, Ipv4Repr, L4Repr, MacAddr, TcpRepr};

fn stages() -> Vec<Interface> {
    ["xdp-in", "xdp-out", "engine-in", "engine-out"]
        .iter()
        .map(|name| Interface {
            name: name.to_string(),
            description: format!("sluice {name}"),
            snaplen: 256,
        })
        .collect()
}

/// 2023-11-14T22:13:20.123456789Z.
const TS: u64 = 1_700_000_000_123_456_789;

fn syn_frame() -> Vec<u8> {
    let frame = FrameRepr {
        ethernet: EthernetRepr {
            src: MacAddr([2, 0, 0, 0, 0, 1]),
            dst: MacAddr([2, 0, 0, 0, 0, 2]),
            vlan_tci: None,
            ethertype: EtherType::Ipv4,
        },
        ip: Ipv4Repr::new(
            Ipv4Addr::new(198, 51, 100, 10),
            Ipv4Addr::new(203, 0, 113, 80),
            IpProtocol::Tcp,
            0,
        )
        .into(),
        l4: L4Repr::Tcp(TcpRepr {
            src_port: 40000,
            dst_port: 80,
            seq_number: 1,
            ack_number: 0,
            flags: flags::SYN,
            window_len: 65535,
            urgent_at: 0,
            options: &[2, 4, 5, 0xb4],
            payload: &[],
        }),
    };
    let mut buf = vec![0xa5; frame.buffer_len()];
    let n = frame.emit(&mut buf, true).unwrap();
    assert_eq!(n, buf.len());
    buf
}

/// A file with every kind of block: four interfaces, packets with and without comments at
/// odd lengths, one cut by the snap length, drops on two interfaces.
fn sample() -> (Vec<u8>, Capture) {
    let syn = syn_frame();
    let long = vec![0x5a; 300];
    let mut w = Writer::new(Vec::new(), &stages()).unwrap();
    w.write_packet(0, TS, syn.len() as u32, &syn, Some("first SYN"))
        .unwrap();
    w.write_packet(3, TS + 1_000, 1, &[0xee], None).unwrap();
    w.write_packet(2, TS + 2_000, 300, &long, Some("cut"))
        .unwrap();
    w.write_packet(1, u64::MAX, 3, &[1, 2, 3], Some(""))
        .unwrap();
    let bytes = w.finish(&[(1, 7), (3, u64::MAX)], TS + 5_000).unwrap();
    let packet = |interface, ts_unix_ns, orig_len, data: &[u8], comment: Option<&str>| Packet {
        interface,
        ts_unix_ns,
        orig_len,
        data: data.to_vec(),
        comment: comment.map(str::to_string),
    };
    let capture = Capture {
        interfaces: stages(),
        packets: vec![
            packet(0, TS, syn.len() as u32, &syn, Some("first SYN")),
            packet(3, TS + 1_000, 1, &[0xee], None),
            packet(2, TS + 2_000, 300, &long[..256], Some("cut")),
            packet(1, u64::MAX, 3, &[1, 2, 3], Some("")),
        ],
        drops: vec![(1, 7), (3, u64::MAX)],
    };
    (bytes, capture)
}

fn hex(b: &[u8]) -> String {
    b.chunks(4)
        .map(|w| w.iter().map(|x| format!("{x:02x}")).collect::<String>())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Each block's bytes, worked out by hand from the draft's layouts.
#[test]
fn blocks_are_the_drafts_layouts() {
    let iface = Interface {
        name: "xdp-in".into(),
        description: String::new(),
        snaplen: 256,
    };
    let mut w = Writer::new(Vec::new(), &[iface]).unwrap();
    w.write_packet(0, 0x1_0000_0002, 60, &[0xaa, 0xbb, 0xcc], None)
        .unwrap();
    let got = w.finish(&[(0, 7)], 5).unwrap();
    #[rustfmt::skip]
    let want: Vec<u8> = [
        // SHB: type, length 44, magic, version 1.0, section length -1,
        // shb_userappl "sluice" (6 bytes, padded to 8), opt_endofopt, length.
        &[0x0a, 0x0d, 0x0d, 0x0a, 44, 0, 0, 0, 0x4d, 0x3c, 0x2b, 0x1a, 1, 0, 0, 0][..],
        &[0xff; 8],
        &[4, 0, 6, 0], b"sluice", &[0, 0], &[0, 0, 0, 0], &[44, 0, 0, 0],
        // IDB: type, length 44, LINKTYPE_ETHERNET, reserved, snaplen 256,
        // if_name "xdp-in", if_tsresol 9, opt_endofopt, length.
        &[1, 0, 0, 0, 44, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0],
        &[2, 0, 6, 0], b"xdp-in", &[0, 0],
        &[9, 0, 1, 0, 9, 0, 0, 0], &[0, 0, 0, 0], &[44, 0, 0, 0],
        // EPB: type, length 36, interface 0, timestamp high 1 low 2, captured 3,
        // original 60, data padded to 4, no options, length.
        &[6, 0, 0, 0, 36, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0],
        &[3, 0, 0, 0, 60, 0, 0, 0, 0xaa, 0xbb, 0xcc, 0], &[36, 0, 0, 0],
        // ISB: type, length 40, interface 0, timestamp 5, isb_ifdrop 7, opt_endofopt, length.
        &[5, 0, 0, 0, 40, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0],
        &[5, 0, 8, 0, 7, 0, 0, 0, 0, 0, 0, 0], &[0, 0, 0, 0], &[40, 0, 0, 0],
    ]
    .concat();
    assert_eq!(hex(&got), hex(&want));
    let back = read(&got).unwrap();
    assert_eq!(back.packets[0].ts_unix_ns, 0x1_0000_0002);
    assert_eq!(back.drops, [(0, 7)]);
}

#[test]
fn round_trip() {
    let (bytes, capture) = sample();
    assert_eq!(bytes.len() % 4, 0);
    assert_eq!(read(&bytes).unwrap(), capture);
}

#[test]
fn the_writer_refuses_unknown_interfaces_and_huge_options() {
    let mut w = Writer::new(Vec::new(), &stages()).unwrap();
    let e = w.write_packet(4, TS, 1, &[0], None).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    let comment = "x".repeat(70_000);
    let e = w.write_packet(0, TS, 1, &[0], Some(&comment)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    let e = w.finish(&[(9, 1)], TS).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
}

/// Other writers' files: microsecond timestamps (no if_tsresol), an unknown block skipped.
#[test]
fn reads_microsecond_interfaces_and_skips_unknown_blocks() {
    let mut file = section_header().unwrap();
    let mut idb = BlockBuf::new(block::IDB);
    idb.u16(LINKTYPE_ETHERNET);
    idb.u16(0);
    idb.u32(0);
    file.extend(idb.finish().unwrap());
    // A Name Resolution Block with no records but its end marker.
    let mut nrb = BlockBuf::new(4);
    nrb.u32(0);
    file.extend(nrb.finish().unwrap());
    let mut epb = BlockBuf::new(block::EPB);
    epb.u32(0);
    epb.timestamp(1_700_000_000_123_456);
    epb.u32(2);
    epb.u32(2);
    epb.padded(&[7, 8]);
    file.extend(epb.finish().unwrap());
    let c = read(&file).unwrap();
    assert_eq!(c.interfaces, [Interface::default()]);
    assert_eq!(c.packets[0].ts_unix_ns, 1_700_000_000_123_456_000);
    assert_eq!(c.packets[0].data, [7, 8]);
}

#[test]
fn refuses_what_it_does_not_read_with_a_clear_error() {
    let (bytes, _) = sample();
    // Classic pcap.
    assert_eq!(
        read(&[0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0]),
        Err(PcapngError::NotPcapng)
    );
    assert_eq!(read(b"hello, world"), Err(PcapngError::NotPcapng));
    // The same section big-endian: the magic reads backwards.
    let mut big = bytes.clone();
    big[8..12].copy_from_slice(&[0x1a, 0x2b, 0x3c, 0x4d]);
    assert_eq!(read(&big), Err(PcapngError::BigEndian));
    let mut v2 = bytes.clone();
    v2[12] = 2;
    assert_eq!(read(&v2), Err(PcapngError::Version { major: 2, minor: 0 }));
    // Two sections.
    let mut two = bytes.clone();
    two.extend_from_slice(&bytes);
    assert_eq!(
        read(&two),
        Err(PcapngError::SecondSection {
            offset: bytes.len()
        })
    );
    // A packet naming interface 4 of 4.
    let shb_idbs = (0..5).fold(0, |at, _| next_block(&bytes, at).unwrap().2);
    let mut unknown = bytes.clone();
    unknown[shb_idbs + 8] = 4;
    assert_eq!(
        read(&unknown),
        Err(PcapngError::UnknownInterface {
            offset: shb_idbs,
            interface: 4
        })
    );
    // The trailing length of the first packet block disagrees with the leading one.
    let epb_len = le32(&bytes, shb_idbs + 4).unwrap() as usize;
    let mut mismatch = bytes.clone();
    mismatch[shb_idbs + epb_len - 4] ^= 4;
    assert!(
        matches!(read(&mismatch), Err(PcapngError::BlockLength { offset, .. }) if offset == shb_idbs),
        "{:?}",
        read(&mismatch)
    );
    // A Simple Packet Block.
    let mut spb = bytes.clone();
    spb[shb_idbs] = 3;
    assert_eq!(
        read(&spb),
        Err(PcapngError::UnsupportedBlock {
            offset: shb_idbs,
            block_type: 3
        })
    );
    let message = PcapngError::BigEndian.to_string();
    assert!(message.contains("big-endian"), "{message}");
}

/// Every prefix of a good file either ends on a block boundary (and reads as the packets so
/// far) or is an error; none panics.
#[test]
fn every_prefix_is_an_error_or_the_blocks_so_far() {
    let (bytes, full) = sample();
    let mut boundaries = 0;
    for n in 0..bytes.len() {
        match read(&bytes[..n]) {
            Ok(c) => {
                boundaries += 1;
                assert_eq!(c.packets, full.packets[..c.packets.len()], "prefix {n}");
                assert!(c.interfaces.len() <= full.interfaces.len());
            }
            Err(e) => assert!(!e.to_string().is_empty()),
        }
    }
    // SHB, 4 IDBs, 4 EPBs, 4 ISBs: the prefixes ending after each block but the last.
    assert_eq!(boundaries, 12);
    assert_eq!(read(&[]), Err(PcapngError::Truncated { offset: 0 }));
}

/// Any byte of a good file set to 0x00, 0xff or bit-flipped: an error or a capture, never a
/// panic (lengths, option lengths and interface ids all go through these). A changed block
/// length, leading or trailing, is always an error.
#[test]
fn corrupt_bytes_never_panic() {
    let (bytes, _) = sample();
    let mut lengths = Vec::new();
    let mut at = 0;
    while at < bytes.len() {
        let next = next_block(&bytes, at).unwrap().2;
        lengths.extend((at + 4..at + 8).chain(next - 4..next));
        at = next;
    }
    assert_eq!(lengths.len(), 13 * 8);
    for i in 0..bytes.len() {
        for v in [0x00, 0xff, bytes[i] ^ 0x80, bytes[i] ^ 0x04] {
            if v == bytes[i] {
                continue;
            }
            let mut b = bytes.clone();
            b[i] = v;
            let got = read(&b);
            if lengths.contains(&i) {
                assert!(got.is_err(), "byte {i} set to {v:#x}: {got:?}");
            }
        }
    }
}

proptest! {
    #[test]
    fn random_bytes_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..400),
                                keep in 0usize..200) {
        // A real header first, so the walk gets past the magic into the random blocks.
        let (bytes, _) = sample();
        let mut data = bytes[..keep.min(bytes.len())].to_vec();
        data.extend_from_slice(&tail);
        let _ = read(&data);
        let _ = read(&tail);
    }
}

/// A file removed when the test ends, whether it passed or not.
struct TempFile(PathBuf);

impl TempFile {
    fn new(name: &str, bytes: &[u8]) -> TempFile {
        let path =
            std::env::temp_dir().join(format!("sluice-{}-{name}.pcapng", std::process::id()));
        std::fs::write(&path, bytes).unwrap();
        TempFile(path)
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// The tool on PATH or in the sbin directories (tcpdump lives in /usr/sbin); a missing tool
/// fails the test: these are the checks that real readers accept the files.
fn tool(name: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/usr/bin", "/sbin"].map(PathBuf::from))
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!("{name} is not installed; scripts/setup.sh installs it (apt-get install {name})")
        })
}

fn run(tool: &Path, args: &[&str], file: &Path) -> String {
    let out = Command::new(tool)
        .args(args)
        .arg(file)
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", tool.display()));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{} {args:?} failed: {}\n{stdout}\n{stderr}",
        tool.display(),
        out.status
    );
    assert!(
        !stderr.contains("corrupt") && !stderr.contains("damaged"),
        "{stderr}"
    );
    stdout
}

/// The file as `sluice capture` makes it: the SYN on xdp-in, statistics at the end.
fn syn_file(name: &str) -> TempFile {
    let syn = syn_frame();
    let mut w = Writer::new(Vec::new(), &stages()).unwrap();
    w.write_packet(0, TS, syn.len() as u32, &syn, Some("client SYN"))
        .unwrap();
    TempFile::new(name, &w.finish(&[(0, 3)], TS + 1).unwrap())
}

#[test]
fn tcpdump_reads_the_file() {
    let tcpdump = tool("tcpdump");
    let file = syn_file("tcpdump");
    let out = run(
        &tcpdump,
        &["-nn", "-tt", "--time-stamp-precision=nano", "-r"],
        &file.0,
    );
    let line = out
        .lines()
        .next()
        .unwrap_or_else(|| panic!("no packet: {out}"));
    assert!(
        line.starts_with(
            "1700000000.123456789 IP 198.51.100.10.40000 > 203.0.113.80.80: Flags [S], seq 1,"
        ),
        "{out}"
    );
    assert!(
        line.contains("win 65535, options [mss 1460], length 0"),
        "{out}"
    );
    assert_eq!(out.lines().count(), 1, "{out}");
}

#[test]
fn tshark_reads_the_file() {
    let tshark = tool("tshark");
    let file = syn_file("tshark");
    let out = run(&tshark, &["-n", "-r"], &file.0);
    for want in [
        "198.51.100.10",
        "203.0.113.80",
        "40000",
        "[SYN]",
        "MSS=1460",
    ] {
        assert!(out.contains(want), "missing {want:?} in {out}");
    }
    // The interface's name and the packet's comment came through the options.
    let fields = run(
        &tshark,
        &[
            "-n",
            "-T",
            "fields",
            "-e",
            "frame.interface_name",
            "-e",
            "frame.comment",
            "-e",
            "frame.time_epoch",
            "-r",
        ],
        &file.0,
    );
    assert_eq!(
        fields.trim_end(),
        "xdp-in\tclient SYN\t1700000000.123456789",
        "{fields}"
    );
    // Wireshark's capinfos (tshark's package) reads the section and interface options and
    // counts the statistics blocks.
    let info = run(&tool("capinfos"), &[], &file.0);
    for want in [
        "Capture application: sluice",
        "Number of interfaces in file: 4",
        "Name = engine-out",
        "Description = sluice engine-out",
        "Encapsulation = Ethernet (1 - ether)",
        "Capture length = 256",
        "Time precision = nanoseconds (9)",
        "Number of stat entries = 1",
    ] {
        assert!(info.contains(want), "missing {want:?} in {info}");
    }
}
