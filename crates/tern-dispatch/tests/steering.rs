//! No value in a QNP header steers a request past its rules: requests with random header fields
//! (`req_type`, `seg_cnt`, packet counts and sequence numbers, lengths) and random record
//! layouts (missing, repeated, reordered or split dispatch fields, cuts anywhere) go through the
//! RSD and the workers' QNP servers, in memory; every request a worker delivers must be one the
//! naive rule evaluator sends to that worker, judged on the request as the worker decodes it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use proptest::prelude::*;
use tern_dispatch::apps::kv::Get;
use tern_dispatch::kv::GET;
use tern_dispatch::matcher::Machine;
use tern_dispatch::matcher::reference::NaiveMatcher;
use tern_dispatch::rsd::{Rsd, Verdict, sender_hash};
use tern_dispatch::synth::Spec;
use tern_qnp::{DropReason, QnpConfig, Server};
use tern_wire::qnp::{Flags, HEADER_LEN, Packet, Repr};
use tern_wire::tlv::Message;

const WORKERS: u16 = 4;

/// One request as a hostile client may send it.
#[derive(Debug, Clone)]
struct Hostile {
    /// TLV records (field, value), in this order.
    records: Vec<(u8, Vec<u8>)>,
    /// Cut points into the payload (fractions), giving the packets.
    cuts: Vec<u16>,
    req_type: u8,
    /// `seg_cnt` of each packet, as sent.
    seg_cnts: Vec<u8>,
    /// Packets declared in the header (0: the true count).
    declared_pkts: u8,
    /// Extra bytes added to the declared length.
    len_skew: i8,
    /// Send the packets in this rotation.
    rotate: usize,
}

fn key(spec: Spec) -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        (0..spec.rules, 0u64..1000).prop_map(move |(r, id)| spec.key(r, 62, id)),
        prop::collection::vec(any::<u8>(), 0..80),
        // A rule's key cut short or with a byte changed.
        (0..spec.rules, 0usize..62, any::<u8>()).prop_map(move |(r, at, b)| {
            let mut k = spec.key(r, 62, 1);
            if at % 2 == 0 {
                k.truncate(at);
            } else {
                k[at] = b;
            }
            k
        }),
    ]
}

fn hostile(spec: Spec) -> impl Strategy<Value = Hostile> {
    let records = (key(spec), key(spec), 0usize..6, prop::collection::vec(any::<u8>(), 0..3000)).prop_map(
        |(k1, k2, layout, pad)| match layout {
            // Honest: the key alone, or the key then an unknown field (skipped by the decoder).
            0 => vec![(1, k1)],
            1 => vec![(1, k1), (9, pad)],
            // The key in two records (a split value), possibly far apart.
            2 => {
                let cut = k1.len() / 2;
                vec![(1, k1[..cut].to_vec()), (9, pad), (1, k1[cut..].to_vec())]
            }
            // Another field first, or no key at all.
            3 => vec![(9, pad), (1, k1)],
            4 => vec![(9, pad)],
            // Two keys.
            _ => vec![(1, k1), (1, k2)],
        },
    );
    (
        records,
        prop::collection::vec(any::<u16>(), 0..4),
        prop_oneof![4 => Just(GET), 1 => any::<u8>()],
        prop::collection::vec(any::<u8>(), 5),
        prop_oneof![3 => Just(0u8), 1 => 1u8..6],
        prop_oneof![3 => Just(0i8), 1 => any::<i8>()],
        0usize..4,
    )
        .prop_map(|(records, cuts, req_type, seg_cnts, declared_pkts, len_skew, rotate)| Hostile {
            records,
            cuts,
            req_type,
            seg_cnts,
            declared_pkts,
            len_skew,
            rotate,
        })
}

fn encode(records: &[(u8, Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut w = tern_wire::tlv::Writer::new(&mut out);
    for (f, v) in records {
        w.put_bytes(*f, v);
    }
    out
}

/// The packets of a hostile request, ready to send.
fn packets(h: &Hostile, req_id: u32, honest_seg_cnt: bool) -> Vec<Vec<u8>> {
    let payload = encode(&h.records);
    let mut cuts: Vec<usize> = h.cuts.iter().map(|&c| usize::from(c) * payload.len() / 65536).collect();
    cuts.push(0);
    cuts.push(payload.len());
    cuts.sort_unstable();
    cuts.dedup();
    // A packet holds at most 1450 payload bytes: cut more where a piece is longer.
    let mut bounds = vec![0];
    for w in cuts.windows(2) {
        let mut at = w[0];
        while w[1] - at > 1450 {
            at += 1450;
            bounds.push(at);
        }
        bounds.push(w[1]);
    }
    bounds.dedup();
    let n = (bounds.len() - 1).max(1);
    let declared = if h.declared_pkts == 0 { n as u8 } else { h.declared_pkts };
    let len = (payload.len() as i64 + i64::from(h.len_skew)).max(0) as u32;
    let pieces: Vec<&[u8]> =
        if bounds.len() < 2 { vec![&payload[..]] } else { bounds.windows(2).map(|w| &payload[w[0]..w[1]]).collect() };
    let mut out: Vec<Vec<u8>> = pieces
        .iter()
        .enumerate()
        .map(|(i, piece)| {
            let seg_cnt = if honest_seg_cnt && i == 0 {
                tern_wire::qnp::seg_cnt_for(payload.len().min(piece.len()))
            } else {
                h.seg_cnts[i % h.seg_cnts.len()]
            };
            let repr = Repr {
                app_id: 1,
                req_type: h.req_type,
                req_id,
                req_acked_id: req_id,
                req_len_in_bytes: len,
                req_len_in_pkts: declared,
                pkt_seq_num_in_req: i as u8,
                flags: Flags::DATA,
                seg_cnt,
            };
            let mut pkt = vec![0u8; HEADER_LEN];
            repr.emit(&mut Packet::new_unchecked(&mut pkt[..]));
            pkt.extend_from_slice(piece);
            pkt
        })
        .collect();
    let k = h.rotate % out.len();
    out.rotate_left(k);
    out
}

struct Rig {
    rsd: Rsd,
    workers: Vec<Server>,
    naive: NaiveMatcher,
}

fn rig(spec: Spec) -> Rig {
    let set = spec.rule_set(WORKERS);
    let mut rsd = Rsd::new(256, WORKERS);
    rsd.install(1, Some(Arc::new(Machine::compile(&set, 1).unwrap())));
    let cfg = QnpConfig { max_pkts_per_request: 8, ..QnpConfig::default() };
    let workers = (0..WORKERS)
        .map(|_| {
            let mut s = Server::new(cfg.clone(), &[1], Instant::now());
            for (m, t) in &set.app(1).unwrap().requests {
                s.declare_request_type(1, *t, &m.dispatch_fields());
            }
            s
        })
        .collect();
    Rig { rsd, workers, naive: NaiveMatcher::new(&set) }
}

/// Sends every request through the RSD and the workers; returns (answered, honest answered).
fn run(rig: &mut Rig, reqs: &[Hostile], honest_seg_cnt: bool) -> Result<usize, TestCaseError> {
    let peer: SocketAddr = "10.0.0.1:4000".parse().unwrap();
    let now = Instant::now();
    let mut answered = 0;
    let mut scratch = Vec::new();
    for (i, h) in reqs.iter().enumerate() {
        for pkt in packets(h, 1000 + i as u32, honest_seg_cnt) {
            let Verdict::Queue(q) = rig.rsd.dispatch(sender_hash(&peer), &pkt) else { continue };
            let Some(inc) = rig.workers[usize::from(q)].handle_packet(now, peer, &pkt) else { continue };
            // What the worker's handler would get.
            let Ok(get) = Get::decode_parts(inc.parts.iter()) else { continue };
            answered += 1;
            let mut canonical = Vec::new();
            get.encode(&mut canonical);
            let want = rig.naive.decide(1, inc.handle.req_type, &canonical, &mut scratch).unwrap();
            prop_assert_eq!(q, want.queue, "request {:?} (key {:?}) answered by worker {}", h, get.key, q);
        }
    }
    Ok(answered)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Random headers and layouts: whatever is answered was answered where its rules say.
    #[test]
    fn no_header_field_steers_a_request(reqs in prop::collection::vec(hostile(Spec::default()), 1..40)) {
        let mut r = rig(Spec::default());
        run(&mut r, &reqs, false)?;
    }

    /// With `seg_cnt` set as a sender must, the honest layouts are answered (the check refuses
    /// what it must and no more).
    #[test]
    fn honest_requests_are_answered(keys in prop::collection::vec(key(Spec::default()), 1..20)) {
        let mut r = rig(Spec::default());
        let reqs: Vec<Hostile> = keys
            .into_iter()
            .map(|k| Hostile {
                records: vec![(1, k)],
                cuts: vec![],
                req_type: GET,
                seg_cnts: vec![0],
                declared_pkts: 0,
                len_skew: 0,
                rotate: 0,
            })
            .collect();
        let answered = run(&mut r, &reqs, true)?;
        prop_assert_eq!(answered, reqs.len());
    }
}

/// Each refusal has its name: at the RSD, and at the worker for what the RSD cannot see (a
/// dispatch field again in a later packet).
#[test]
fn refusals_are_counted_by_name() {
    let spec = Spec::default();
    let mut r = rig(spec);
    let peer: SocketAddr = "10.0.0.1:4000".parse().unwrap();
    let k = spec.key(5, 62, 1);
    let honest = |records: Vec<(u8, Vec<u8>)>, cuts: Vec<u16>| Hostile {
        records,
        cuts,
        req_type: GET,
        seg_cnts: vec![0; 5],
        declared_pkts: 0,
        len_skew: 0,
        rotate: 0,
    };
    // The key split over two packets: the first packet leads with a whole key record (the first
    // piece), so only the worker, after reassembly, sees the second piece.
    let records = vec![(1, k[..40].to_vec()), (1, k[40..].to_vec())];
    let total = encode(&records).len();
    let split = honest(records, vec![(43 * 65536usize).div_ceil(total) as u16]);
    let pkts = packets(&split, 7, true);
    assert_eq!(pkts.len(), 2, "two packets");
    let mut queues = Vec::new();
    for p in &pkts {
        let Verdict::Queue(q) = r.rsd.dispatch(sender_hash(&peer), p) else { panic!("the RSD decides it") };
        queues.push(q);
        assert!(r.workers[usize::from(q)].handle_packet(Instant::now(), peer, p).is_none());
    }
    let w = &r.workers[usize::from(queues[0])];
    assert_eq!(w.stats().drops_of(DropReason::SplitDispatchField), 1);
    // An undeclared type is dropped by the worker too (as in `rss` mode, with no RSD).
    let mut other = honest(vec![(1, k.clone())], vec![]);
    other.req_type = 2;
    let p = &packets(&other, 8, true)[0];
    assert!(r.workers[0].handle_packet(Instant::now(), peer, p).is_none());
    assert_eq!(r.workers[0].stats().drops_of(DropReason::UnknownReqType), 1);
    // A first packet whose seg_cnt does not cover the key.
    let mut short = honest(vec![(1, k)], vec![]);
    short.seg_cnts = vec![1];
    let p = &packets(&short, 9, false)[0];
    assert!(r.workers[0].handle_packet(Instant::now(), peer, p).is_none());
    assert_eq!(r.workers[0].stats().drops_of(DropReason::SegCntShort), 1);
}
