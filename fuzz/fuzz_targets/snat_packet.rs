//! CLIP's SNAT state (`tern_switch::nat`): any bytes as a run of IPv4 packets through one NAT,
//! each going out or in, time passing between them. Nothing may panic; a packet translated
//! keeps a valid IPv4 header checksum if it had one; a connection made is found again by its
//! tuple; the table never holds more than its capacity.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_switch::nat::{Dir, Nat, NatConfig};

fuzz_target!(|data: &[u8]| {
    let mut cfg = NatConfig::new(0xc000_0201);
    cfg.capacity = 16;
    cfg.slices = 1 + u16::from(data.first().copied().unwrap_or(0) % 3);
    cfg.slice = u16::from(data.get(1).copied().unwrap_or(0)) % cfg.slices;
    let mut nat = Nat::new(cfg).expect("a sound configuration");
    let mut rest = data.get(2..).unwrap_or(&[]);
    let mut now = 0u64;
    // Each packet: a control byte (bit 0: in; bits 1-7: seconds passing), a length, the bytes.
    while rest.len() >= 2 {
        let (ctl, len) = (rest[0], usize::from(rest[1]));
        let take = len.min(rest.len() - 2);
        let mut pkt = rest[2..2 + take].to_vec();
        rest = &rest[2 + take..];
        now += u64::from(ctl >> 1) * 1_000_000_000;
        let dir = if ctl & 1 == 1 { Dir::In } else { Dir::Out };
        let ok_before = pkt.len() >= 20 && pkt[0] == 0x45 && tern_wire::frame::checksum(&pkt[..20]) == 0;
        if let Ok(tr) = nat.translate(&mut pkt, dir, now) {
            if ok_before {
                assert_eq!(tern_wire::frame::checksum(&pkt[..20]), 0, "a valid header checksum broke");
            }
            if dir == Dir::Out && !tr.icmp_error {
                assert_eq!(nat.get(&tr.orig, now).map(|c| c.public), Some(tr.public));
            }
        }
        assert!(nat.len() <= 16);
    }
});
