//! Fuzzes the BGP decoder: framing plus whole-message decode must never panic, and any
//! message it accepts must re-encode and decode to the same value.
#![no_main]

use bgp::codec::{Message, decode, frame_len};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = frame_len(data);
    if let Ok(m) = decode(data) {
        // Treat-as-withdraw rewrites the UPDATE, so only clean messages must round-trip.
        if let Message::Update(u) = &m
            && u.withdraw_cause.is_some()
        {
            return;
        }
        let again = m.encode();
        assert_eq!(decode(&again).ok(), Some(m));
    }
});
