//! Fuzzes the BFD control-packet decoder: it must never panic, and any packet it accepts
//! must re-encode and decode to the same value (the length field is rewritten to 24).
#![no_main]

use bgp::bfd::ControlPacket;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = ControlPacket::decode(data) {
        let mut buf = [0u8; ControlPacket::LEN];
        let n = p.encode(&mut buf);
        assert_eq!(ControlPacket::decode(&buf[..n]), Ok(p));
    }
});
