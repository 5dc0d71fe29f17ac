//! The KV cache task: its messages byte for byte and refused by name; hits, misses and SETs;
//! never a value a SET replaced, even when the server's answer to an older GET comes back after
//! the SET (a property test against a server whose answers come back in any order); bounds.

use std::collections::HashMap;

use proptest::prelude::*;
use tern_chain::kv::{Cache, KvConfig, MAX_KEY, Msg, MsgError, Op, Verdict, Way};

fn msg(op: Op, id: u32, key: &[u8], value: &[u8]) -> Vec<u8> {
    Msg { op, id, key, value }.to_vec()
}

#[test]
fn messages_are_the_documented_bytes() {
    assert_eq!(msg(Op::Set, 0x0102_0304, b"ab", b"xyz"), [2, 2, 0, 3, 1, 2, 3, 4, b'a', b'b', b'x', b'y', b'z']);
    assert_eq!(msg(Op::Get, 7, b"k", b""), [1, 1, 0, 0, 0, 0, 0, 7, b'k']);
    let b = msg(Op::Value, 9, b"key", b"val");
    assert_eq!(Msg::parse(&b), Ok(Msg { op: Op::Value, id: 9, key: b"key", value: b"val" }));
}

#[test]
fn what_is_not_a_message_is_refused_by_name() {
    assert_eq!(Msg::parse(&[1, 1, 0, 0, 0, 0, 0]), Err(MsgError::Short(7)));
    assert_eq!(Msg::parse(&[9, 1, 0, 0, 0, 0, 0, 0, b'k']), Err(MsgError::Op(9)));
    // A key longer than what follows; no key; a GET with a value; bytes after the value.
    assert_eq!(Msg::parse(&[1, 5, 0, 0, 0, 0, 0, 0, b'k']), Err(MsgError::Short(9)));
    assert_eq!(Msg::parse(&[1, 0, 0, 0, 0, 0, 0, 0]), Err(MsgError::Lengths { key: 0, value: 0, total: 8 }));
    assert_eq!(
        Msg::parse(&[1, 1, 0, 1, 0, 0, 0, 0, b'k', b'v']),
        Err(MsgError::Lengths { key: 1, value: 1, total: 10 })
    );
    assert_eq!(
        Msg::parse(&[1, 1, 0, 0, 0, 0, 0, 0, b'k', b'!']),
        Err(MsgError::Lengths { key: 1, value: 0, total: 10 })
    );
    let mut c = Cache::new(KvConfig::default());
    assert_eq!(c.on_request(&[0xff; 3]), Verdict::Drop);
    c.on_response(&[0xff; 3]);
    assert_eq!(c.stats().malformed, 2);
    // The longest key is taken.
    assert!(Msg::parse(&msg(Op::Get, 1, &[b'k'; MAX_KEY], b"")).is_ok());
}

#[test]
fn a_set_between_a_get_and_its_answer_keeps_the_old_value_out() {
    let mut c = Cache::new(KvConfig::default());
    assert_eq!(c.on_request(&msg(Op::Get, 1, b"k", b"")), Verdict::Forward);
    assert_eq!(c.on_request(&msg(Op::Set, 2, b"k", b"new")), Verdict::Forward);
    // The answer to GET 1 (the old value) comes back after the SET passed: not kept.
    c.on_response(&msg(Op::Value, 1, b"k", b"old"));
    assert_eq!(c.get(b"k"), None);
    assert_eq!(c.stats().not_kept_after_set, 1);
    // A GET after the SET: its answer is kept, and the next GET is answered here.
    c.on_request(&msg(Op::Get, 3, b"k", b""));
    c.on_response(&msg(Op::Value, 3, b"k", b"new"));
    let mut answer = Vec::new();
    assert_eq!(c.on_request_answer(&msg(Op::Get, 4, b"k", b""), &mut answer), Verdict::Answer);
    assert_eq!(Msg::parse(&answer).unwrap(), Msg { op: Op::Value, id: 4, key: b"k", value: b"new" });
    // A SET removes what is kept.
    c.on_request(&msg(Op::Set, 5, b"k", b"newer"));
    assert_eq!(c.on_request(&msg(Op::Get, 6, b"k", b"")), Verdict::Forward);
    let s = c.stats();
    assert_eq!((s.hits, s.misses, s.sets, s.kept), (1, 3, 2, 1));
    // An answer for a GET it never saw, or NOT_FOUND, is not kept.
    c.on_response(&msg(Op::Value, 99, b"z", b"?"));
    c.on_response(&msg(Op::NotFound, 6, b"k", b""));
    assert_eq!(c.len(), 0);
}

#[test]
fn what_is_kept_stays_within_its_bounds_least_recently_used_first() {
    let mut c = Cache::new(KvConfig { max_bytes: 100, max_entries: 3, max_pending: 8, ..KvConfig::default() });
    let keep = |c: &mut Cache, id: u32, key: &[u8], len: usize| {
        c.on_request(&msg(Op::Get, id, key, b""));
        c.on_response(&msg(Op::Value, id, key, &vec![b'v'; len]));
    };
    keep(&mut c, 1, b"a", 10);
    keep(&mut c, 2, b"b", 10);
    keep(&mut c, 3, b"c", 10);
    // "a" is used, so "b" is the least recently used when "d" comes.
    assert_eq!(c.on_request(&msg(Op::Get, 4, b"a", b"")), Verdict::Answer);
    keep(&mut c, 5, b"d", 10);
    assert_eq!((c.get(b"b"), c.len()), (None, 3));
    // A large value pushes out as many as it needs.
    keep(&mut c, 6, b"e", 80);
    assert!(c.bytes() <= 100 && c.get(b"e").is_some());
    assert!(c.stats().evicted >= 3);
    // One too large for the cache is not kept at all.
    keep(&mut c, 7, b"f", 200);
    assert_eq!(c.get(b"f"), None);
}

/// One client address cannot push every other client's GETs out of those remembered: past its
/// share (here 2, its ports together) its newer GET makes its own oldest forgotten
/// (`client_share_full`, that one's answer not kept), never another address's — so another
/// address's GET stays remembered through any number of its misses — and a client whose GETs
/// are lost on the way (never answered) still has its newest remembered and their answers kept.
#[test]
fn one_client_keeps_to_its_share_of_the_gets_remembered() {
    let mut c = Cache::new(KvConfig { max_pending: 8, max_pending_per_client: 2, ..KvConfig::default() });
    let (a, mut a2, mut b) = (Way::CLIENT, Way::CLIENT, Way::CLIENT);
    a2.src.1 += 1;
    b.src.0 = [10, 0, 0, 9];
    let mut sink = Vec::new();
    // Another client's GET, remembered before the first client's misses.
    c.request(&msg(Op::Get, 20, b"k20", b""), b, &mut sink);
    for (way, id, key) in [(a, 1, b"k1"), (a2, 2, b"k2"), (a, 3, b"k3")] {
        assert_eq!(c.request(&msg(Op::Get, id, key, b""), way, &mut sink), Verdict::Forward);
    }
    assert_eq!(c.stats().client_share_full, 1);
    // The third GET's answer is kept; the first's, forgotten for it, is not.
    c.response(&msg(Op::Value, 3, b"k3", b"v3"), a.back());
    c.response(&msg(Op::Value, 1, b"k1", b"v1"), a.back());
    assert_eq!((c.get(b"k3"), c.get(b"k1")), (Some(&b"v3"[..]), None));
    // The first client's GETs lost on the way (never answered), a hundred of them: each forgets
    // one of its own, and the newest is remembered and its answer kept.
    for id in 100..200 {
        c.request(&msg(Op::Get, id, format!("lost{id}").as_bytes(), b""), a, &mut sink);
    }
    c.request(&msg(Op::Get, 5, b"k5", b""), a, &mut sink);
    c.response(&msg(Op::Value, 5, b"k5", b"v5"), a.back());
    assert_eq!(c.get(b"k5"), Some(&b"v5"[..]));
    assert_eq!(c.stats().client_share_full, 101);
    // The other client's GET, remembered all along, takes its answer.
    c.response(&msg(Op::Value, 20, b"k20", b"v20"), b.back());
    assert_eq!(c.get(b"k20"), Some(&b"v20"[..]));
    // A GET that names an id the client has remembered replaces it, forgetting no other.
    c.request(&msg(Op::Get, 7, b"k7", b""), a, &mut sink);
    assert_eq!(c.request(&msg(Op::Get, 7, b"k8", b""), a, &mut sink), Verdict::Forward);
    c.response(&msg(Op::Value, 7, b"k8", b"v8"), a.back());
    assert_eq!((c.get(b"k8"), c.stats().client_share_full), (Some(&b"v8"[..]), 101));
}

/// A client's share smaller in the next generation (an update): the client holding more than
/// it passes on keeps them until its next GET, which forgets its oldest down to the new share.
#[test]
fn a_smaller_share_after_an_update_forgets_the_clients_oldest() {
    let mut old = Cache::new(KvConfig { max_pending_per_client: 4, ..KvConfig::default() });
    let mut sink = Vec::new();
    for id in 1..=4 {
        old.request(&msg(Op::Get, id, format!("k{id}").as_bytes(), b""), Way::CLIENT, &mut sink);
    }
    let mut new = Cache::new(KvConfig { max_pending_per_client: 2, ..KvConfig::default() });
    assert!(new.swap_entries(&mut old));
    new.request(&msg(Op::Get, 5, b"k5", b""), Way::CLIENT, &mut sink);
    assert_eq!(new.stats().client_share_full, 3, "down to the share, the new GET among them");
    for id in 1..=5 {
        new.response(&msg(Op::Value, id, format!("k{id}").as_bytes(), b"v"), Way::CLIENT.back());
    }
    let kept: Vec<bool> = (1..=5).map(|id| new.get(format!("k{id}").as_bytes()).is_some()).collect();
    assert_eq!(kept, [false, false, false, true, true]);
}

/// An answer is kept only if it came back the way its GET went (docs/chain.md, "KV cache"): a
/// VALUE a client forges — from its own side, even with the server's address — or one from
/// another address, is not kept, and the GET still takes its real answer; values are the
/// server's they came from (a GET to another server misses); two clients using one request id
/// each have their own GET remembered.
#[test]
fn only_answers_that_come_back_the_way_their_get_went_are_kept() {
    let mut c = Cache::new(KvConfig::default());
    let mut answer = Vec::new();
    let (client, server) = (([10, 0, 0, 5], 4000), ([10, 0, 0, 9], 11211));
    let to_server = Way { side: 0, src: client, dst: server };
    let get = |id, key: &[u8]| msg(Op::Get, id, key, b"");
    let value = |id, key: &[u8], v: &[u8]| msg(Op::Value, id, key, v);
    assert_eq!(c.request(&get(1, b"k"), to_server, &mut answer), Verdict::Forward);
    // Forged on the clients' side with the server's address, and from another address.
    c.response(&value(1, b"k", b"forged"), Way { side: 0, ..to_server.back() });
    c.response(&value(1, b"k", b"elsewhere"), Way { src: ([10, 0, 0, 66], 11211), ..to_server.back() });
    assert_eq!((c.get_at(server, b"k"), c.stats().not_kept_wrong_way), (None, 2));
    // The real answer, still awaited, is kept.
    c.response(&value(1, b"k", b"real"), to_server.back());
    assert_eq!(c.get_at(server, b"k"), Some(&b"real"[..]));
    assert_eq!(c.request(&get(2, b"k"), to_server, &mut answer), Verdict::Answer);
    // Another server's key of the same name misses; a SET to it leaves this one's value.
    let other = Way { dst: ([10, 0, 0, 10], 11211), ..to_server };
    assert_eq!(c.request(&get(3, b"k"), other, &mut answer), Verdict::Forward);
    c.request(&msg(Op::Set, 4, b"k", b"x"), other, &mut answer);
    assert_eq!(c.get_at(server, b"k"), Some(&b"real"[..]));
    // Two clients, one request id: each GET is remembered, each answer kept for its own.
    let b = Way { src: ([10, 0, 0, 6], 4000), ..to_server };
    c.request(&get(9, b"a"), to_server, &mut answer);
    c.request(&get(9, b"b"), b, &mut answer);
    c.response(&value(9, b"b", b"for b"), b.back());
    c.response(&value(9, b"a", b"for a"), to_server.back());
    assert_eq!((c.get_at(server, b"a"), c.get_at(server, b"b")), (Some(&b"for a"[..]), Some(&b"for b"[..])));
}

/// An update with other bounds passes the cache on (docs/chain.md, "Updates"): the smaller side
/// keeps its most recently used entries and its newest forwarded GETs, the rest evicted
/// (counted) or forgotten (their answers not kept); what it keeps still answers GETs, and a SET
/// after the exchange still removes it.
#[test]
fn entries_pass_to_a_cache_with_other_bounds_within_them() {
    let cfg = |n: usize| KvConfig { max_bytes: 1 << 20, max_entries: n, max_pending: n, ..KvConfig::default() };
    let mut old = Cache::new(cfg(8));
    for k in 0..8u8 {
        old.on_request(&msg(Op::Get, u32::from(k), &[k], b""));
        old.on_response(&msg(Op::Value, u32::from(k), &[k], &[k; 4]));
    }
    // Key 0 used last; GETs 20..24 forwarded, unanswered.
    assert_eq!(old.on_request(&msg(Op::Get, 9, &[0], b"")), Verdict::Answer);
    for id in 20..24 {
        old.on_request(&msg(Op::Get, id, &[100 + id as u8], b""));
    }
    let mut new = Cache::new(cfg(3));
    assert!(new.swap_entries(&mut old));
    assert_eq!((old.len(), new.len(), new.stats().evicted), (0, 3, 5));
    let kept: Vec<u8> = (0..8u8).filter(|k| new.get(&[*k]).is_some()).collect();
    assert_eq!(kept, [0, 6, 7], "the most recently used");
    // Of the four forwarded GETs the newest three are remembered: GET 20's answer is not kept.
    new.on_response(&msg(Op::Value, 20, &[120], b"x"));
    new.on_response(&msg(Op::Value, 23, &[123], b"x"));
    assert_eq!((new.get(&[120]), new.get(&[123]).is_some()), (None, true));
    let mut answer = Vec::new();
    assert_eq!(new.on_request_answer(&msg(Op::Get, 30, &[7], b""), &mut answer), Verdict::Answer);
    new.on_request(&msg(Op::Set, 31, &[7], b"new"));
    assert_eq!(new.get(&[7]), None, "a SET after the exchange removes it");
    // And back into the larger one: all kept (0 and 123; 123's keep pushed 6 out, the SET 7).
    let mut back = Cache::new(cfg(8));
    assert!(back.swap_entries(&mut new));
    assert_eq!((back.len(), back.stats().evicted, back.get(&[0]).is_some()), (2, 0, true));
}

/// A client operation: GET or SET of one of a few keys; the server's answers to earlier GETs
/// delivered back in any order.
#[derive(Debug, Clone)]
enum Step {
    Get(u8),
    Set(u8, u8),
    /// Deliver the pending answer at this index (modulo how many there are).
    Deliver(usize),
    /// A GET of a key by one of three client addresses, answered at once.
    Answered(u8, u8),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        (0u8..3).prop_map(Step::Get),
        (0u8..3, any::<u8>()).prop_map(|(k, v)| Step::Set(k, v)),
        (0usize..8).prop_map(Step::Deliver),
        (0u8..3, 0u8..3).prop_map(|(c, k)| Step::Answered(c, k)),
    ]
}

proptest! {
    /// The server applies each SET when it passes the cache and answers each GET forwarded with
    /// its value then; the answers come back in any order. Whatever happens, a GET the cache
    /// answers gets the server's value at that moment: never one a SET replaced. And a GET
    /// answered at once has its answer kept, whatever GETs of any client still wait for theirs
    /// (a client at its share forgets its own oldest, not the newest).
    #[test]
    fn a_hit_is_never_stale(
        steps in proptest::collection::vec(step(), 1..80),
        max_pending in 1usize..6,
        max_pending_per_client in 1usize..4,
    ) {
        let cfg = KvConfig { max_bytes: 64, max_entries: 2, max_pending, max_pending_per_client };
        let mut c = Cache::new(cfg);
        let mut server: HashMap<u8, u8> = HashMap::new();
        let mut in_flight: Vec<Vec<u8>> = Vec::new();
        let mut id = 0u32;
        for s in steps {
            id += 1;
            match s {
                Step::Get(k) => {
                    let mut answer = Vec::new();
                    match c.on_request_answer(&msg(Op::Get, id, &[k], b""), &mut answer) {
                        Verdict::Answer => {
                            let m = Msg::parse(&answer).unwrap();
                            prop_assert_eq!(Some(m.value[0]), server.get(&k).copied(), "a stale hit for key {}", k);
                        }
                        Verdict::Forward => in_flight.push(match server.get(&k) {
                            Some(v) => msg(Op::Value, id, &[k], &[*v]),
                            None => msg(Op::NotFound, id, &[k], b""),
                        }),
                        Verdict::Drop => prop_assert!(false, "a good GET dropped"),
                    }
                }
                Step::Set(k, v) => {
                    prop_assert_eq!(c.on_request(&msg(Op::Set, id, &[k], &[v])), Verdict::Forward);
                    server.insert(k, v);
                }
                Step::Deliver(i) => {
                    if !in_flight.is_empty() {
                        let r = in_flight.remove(i % in_flight.len());
                        c.on_response(&r);
                    }
                }
                Step::Answered(client, k) => {
                    let mut way = Way::CLIENT;
                    way.src.0[3] = way.src.0[3].wrapping_add(client);
                    let mut answer = Vec::new();
                    let want = server.get(&k).copied();
                    match c.request(&msg(Op::Get, id, &[k], b""), way, &mut answer) {
                        Verdict::Answer => prop_assert_eq!(Some(Msg::parse(&answer).unwrap().value[0]), want),
                        _ => {
                            if let Some(v) = want {
                                c.response(&msg(Op::Value, id, &[k], &[v]), way.back());
                                prop_assert_eq!(c.get(&[k]), Some(&[v][..]), "an answer at once not kept");
                            }
                        }
                    }
                }
            }
        }
    }

    /// Any bytes either way: a verdict or nothing kept, never a panic.
    #[test]
    fn any_bytes_are_taken(b in proptest::collection::vec(any::<u8>(), 0..40), response in any::<bool>()) {
        let mut c = Cache::new(KvConfig::default());
        if response { c.on_response(&b) } else { let _ = c.on_request(&b); }
    }
}
