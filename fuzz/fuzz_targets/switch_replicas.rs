//! CLIP's replica records (docs/clip.md, "Failure"): what a server's `POST /replicas` takes from
//! the network, and what it takes back from its buddy's `GET /handback`. Any bytes as a run of
//! records for the SNAT's and TCP retransmission detection's `adopt_replica` or `take_back`
//! (the records so far as one hand-back), with TCP segments through the detector between them. Nothing may panic; a
//! record is adopted or refused by name; the detector never tracks more than its capacity, and
//! every index it hands out is of its own slice and held by one direction at a time; what each
//! hands back (read from what it adopted) is what a walk of its table finds.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tern_switch::server::{RemoteHandler, Snat, TrdHandler};
use tern_switch::trd::TrdConfig;

fuzz_target!(|data: &[u8]| {
    let cfg = TrdConfig { registers: 16, slice: 1, slices: 2, capacity: 8 };
    let mut trd = TrdHandler::new(cfg).expect("a sound configuration");
    let mut snat = Snat::for_server(1).expect("server 1");
    let mut rest = data;
    let mut now = 0u64;
    let mut resp = [0u8; 9];
    let mut handed: Vec<Vec<u8>> = Vec::new();
    // Each item: a control byte (bit 0: a segment for the detector, else a record; bit 1: for
    // the SNAT), a length, the bytes.
    while rest.len() >= 2 {
        let (ctl, len) = (rest[0], usize::from(rest[1]));
        let take = len.min(rest.len() - 2);
        let bytes = &rest[2..2 + take];
        rest = &rest[2 + take..];
        now += 1_000_000;
        if ctl & 4 != 0 {
            // A hand-back of the records so far (and this one).
            handed.push(bytes.to_vec());
            if handed.len() > 64 {
                handed.remove(0);
            }
            let _ = if ctl & 2 != 0 { snat.take_back(now, &handed) } else { trd.take_back(now, &handed) };
        } else {
            match (ctl & 1, ctl & 2) {
                (1, _) => {
                    let mut l3 = bytes.to_vec();
                    let _ = trd.handle(now, 0, &mut l3, &[], &mut resp);
                    let mut out = Vec::new();
                    trd.take_new(&mut out);
                }
                (_, 0) => {
                    if let Err(e) = trd.adopt_replica(now, bytes) {
                        assert!(!e.is_empty());
                    }
                }
                _ => {
                    if let Err(e) = snat.adopt_replica(now, bytes) {
                        assert!(!e.is_empty());
                    }
                }
            }
        }
        assert!(trd.taken_back() <= trd.trd().len());
        let t = trd.trd();
        assert!(t.len() <= cfg.capacity && t.closed() <= cfg.capacity);
        let mut held: Vec<u32> = t.directions().filter_map(|d| d.1).filter(|&i| t.owns(i)).collect();
        let n = held.len();
        held.sort_unstable();
        held.dedup();
        assert_eq!(held.len(), n, "an index of this slice held twice");
        assert_eq!(n + t.free(), 8, "this slice's indices: held or free, each once");
        // What each hands back (read from what it adopted) is what a walk of its table finds:
        // the entries holding another server's register or public pair.
        let mut out = Vec::new();
        trd.hand_back(&mut out);
        let mut got: Vec<Vec<u8>> = out.iter().map(|r| r[1..17].to_vec()).collect();
        got.sort();
        let t = trd.trd();
        let mut walk: Vec<Vec<u8>> = t
            .directions()
            .filter_map(|(d, i, _)| i.filter(|&i| !t.owns(i)).map(|i| (d, i)))
            .map(|(d, i)| {
                [&d.0.to_be_bytes()[..], &d.1.to_be_bytes(), &d.2.to_be_bytes(), &d.3.to_be_bytes(), &i.to_be_bytes()]
                    .concat()
            })
            .collect();
        walk.sort();
        assert_eq!(got, walk, "the detector's hand-back");
        let mut out = Vec::new();
        snat.hand_back(&mut out);
        let mut got: Vec<Vec<u8>> = out.iter().map(|r| r[..13].to_vec()).collect();
        got.sort();
        let own = u32::from(std::net::Ipv4Addr::new(192, 0, 2, 2));
        let mut walk: Vec<Vec<u8>> = snat
            .nat()
            .connections(0)
            .filter(|c| c.public.0 != own)
            .map(|c| {
                let o = c.orig;
                [
                    &[o.proto][..],
                    &o.src.to_be_bytes(),
                    &o.sport.to_be_bytes(),
                    &o.dst.to_be_bytes(),
                    &o.dport.to_be_bytes(),
                ]
                .concat()
            })
            .collect();
        walk.sort();
        assert_eq!(got, walk, "the SNAT's hand-back");
    }
});
