//! The AES-GCM task: NIST's AES-256-GCM vectors (gcmEncryptExtIV256.rsp) opened through it;
//! sealed frames re-parsed with `etherparse`, every checksum right; nonces never repeated across
//! instances and relaunches under one key; a tag that does not match, or another tenant's key,
//! dropped by name.

use std::collections::HashSet;
use std::sync::Arc;

use etherparse::{NetHeaders, PacketHeaders, TransportHeader};
use tern_chain::aes::ledger::{HEADER, KeyId, Ledger, NUMBERS};
use tern_chain::aes::{AesDrop, AesTask, InstanceError, KeySpace, MAX_IP_LEN, NONCE_LEN, OVERHEAD};
use tern_wire::frame::{build_tcp4, build_udp4};

fn hex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn udp(payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    build_udp4(&mut f, [2; 6], [4; 6], [10, 0, 0, 1], [10, 0, 0, 2], 4000, 5000, 64, payload);
    f
}

/// The UDP payload, after etherparse checks the IPv4 header and UDP checksums.
fn payload(frame: &[u8]) -> Vec<u8> {
    let h = PacketHeaders::from_ethernet_slice(frame).expect("etherparse parses it");
    let Some(NetHeaders::Ipv4(ip, _)) = &h.net else { panic!("not IPv4") };
    assert_eq!(ip.header_checksum, ip.calc_header_checksum(), "IPv4 header checksum");
    let p = h.payload.slice().to_vec();
    let Some(TransportHeader::Udp(u)) = &h.transport else { panic!("not UDP") };
    assert_eq!(u.checksum, u.calc_checksum_ipv4(ip, &p).unwrap(), "UDP checksum");
    assert_eq!(usize::from(u.length), 8 + p.len());
    p
}

/// NIST CAVS gcmEncryptExtIV256.rsp (96-bit IVs, no AAD, 128-bit tags): key, IV, plaintext,
/// ciphertext, tag.
const NIST: [[&str; 5]; 2] = [
    [
        "b52c505a37d78eda5dd34f20c22540ea1b58963cf8e5bf8ffa85f9f2492505b4",
        "516c33929df5a3284ff463d7",
        "",
        "",
        "bdc1ac884d332457a1d2664f168c76f0",
    ],
    [
        "31bdadd96698c204aa9ce1448ea94ae1fb4a9a0b3c9d773b51bb1822666b8f22",
        "0d18e06c7c725ac9e362e1ce",
        "2db5168e932556f8089a0622981d017d",
        "fa4362189661d163fcd6a56d8bf0405a",
        "d636ac1bbedd5cc3ee727dc2ab4a9489",
    ],
];

#[test]
fn nist_vectors_open_and_a_changed_bit_does_not() {
    for [key, iv, pt, ct, tag] in NIST {
        let space = KeySpace::new(hex(key).try_into().unwrap());
        let mut task = AesTask::new(&space).unwrap();
        let sealed = [hex(iv), hex(ct), hex(tag)].concat();
        let mut f = udp(&sealed);
        task.open(&mut f).unwrap();
        assert_eq!(payload(&f), hex(pt), "{iv}");
        // Any one bit changed in nonce, ciphertext or tag: the tag does not match.
        for bit in [0, 8 * NONCE_LEN, 8 * sealed.len() - 1] {
            let mut bad = sealed.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            let mut f = udp(&bad);
            let before = f.clone();
            assert_eq!(task.open(&mut f), Err(AesDrop::BadTag), "{iv}, bit {bit}");
            assert_eq!(f, before, "a dropped frame is left as it was");
        }
    }
}

#[test]
fn sealed_frames_are_well_formed_and_open_back() {
    let space = KeySpace::new([9; 32]);
    let mut t = AesTask::new(&space).unwrap();
    for len in [0usize, 1, 15, 16, 17, 1000] {
        let data: Vec<u8> = (0..len).map(|i| (i * 7) as u8).collect();
        let mut f = udp(&data);
        t.seal(&mut f).unwrap();
        let p = payload(&f);
        assert_eq!(p.len(), len + OVERHEAD);
        assert_eq!(&p[..4], &t.instance().to_be_bytes(), "the nonce starts with the instance");
        if len > 4 {
            assert_ne!(&p[NONCE_LEN..NONCE_LEN + len], &data[..], "the payload is encrypted");
        }
        t.open(&mut f).unwrap();
        assert_eq!(payload(&f), data);
    }
    assert_eq!((t.stats().sealed, t.stats().opened), (6, 6));
}

#[test]
fn nonces_never_repeat_across_instances_and_relaunches() {
    let space = KeySpace::new([1; 32]);
    let mut nonces = HashSet::new();
    // Four instances, each relaunched (a new instance) twice, sealing 100 frames each.
    for _ in 0..3 {
        let mut tasks: Vec<AesTask> = (0..4).map(|_| AesTask::new(&space).unwrap()).collect();
        for t in &mut tasks {
            for _ in 0..100 {
                let mut f = udp(b"same payload every time");
                t.seal(&mut f).unwrap();
                assert!(nonces.insert(payload(&f)[..NONCE_LEN].to_vec()), "a nonce repeated");
            }
        }
    }
    assert_eq!((nonces.len(), space.instances()), (1200, 12));
}

/// Key spaces on one nonce ledger (docs/chain.md, "AES-GCM") stand for servers restarted, or
/// two at once, given one key: across 5 "processes" of 30 instances each (past a block of
/// 64), two of them at a time from two threads, no nonce repeats; each process's first
/// instance number starts a block of its own. A ledger lost repeats numbers but not nonces. With
/// the numbers run out, an instance is refused by name; a random key space's instances start at
/// random numbers.
#[test]
fn a_ledger_keeps_nonces_unique_across_processes() {
    let dir = std::env::temp_dir().join(format!("tern-aes-ledger-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let path = dir.join("aes-nonces");
    let key = [3; 32];
    let process = || {
        let space = KeySpace::with_ledger(key, Arc::new(Ledger::new(&path)));
        let mut nonces = Vec::new();
        for _ in 0..30 {
            let mut t = AesTask::new(&space).unwrap();
            for _ in 0..3 {
                let mut f = udp(b"same payload every time");
                t.seal(&mut f).unwrap();
                nonces.push(payload(&f)[..NONCE_LEN].to_vec());
            }
        }
        assert_eq!(space.instances(), 30);
        nonces
    };
    let mut all: Vec<Vec<u8>> = process();
    for _ in 0..2 {
        let (a, b) = std::thread::scope(|s| {
            let h = s.spawn(process);
            (process(), h.join().unwrap())
        });
        all.extend(a.into_iter().chain(b));
    }
    let firsts: HashSet<u32> = all.chunks(90).map(|c| u32::from_be_bytes(c[0][..4].try_into().unwrap())).collect();
    assert_eq!(firsts, HashSet::from([0, 64, 128, 192, 256]), "each process starts a block");
    let unique: HashSet<&Vec<u8>> = all.iter().collect();
    assert_eq!((all.len(), unique.len()), (450, 450), "a nonce repeated");
    assert_eq!(Ledger::new(&path).read().unwrap(), vec![(KeyId::of(&key), 320)]);

    // The ledger lost (a new file, the same key): its numbers start again at 0, but no nonce
    // repeats, each instance's count starting at random below 2^63 (it fails with counts from 0).
    std::fs::remove_file(&path).unwrap();
    let again = process();
    assert_eq!(u32::from_be_bytes(again[0][..4].try_into().unwrap()), 0, "a new ledger starts at 0");
    let seen: HashSet<&Vec<u8>> = all.iter().collect();
    assert!(again.iter().all(|n| !seen.contains(n)), "a lost ledger repeated a nonce");
    let count = |n: &Vec<u8>| u64::from_be_bytes(n[4..].try_into().unwrap());
    assert!(all.iter().chain(&again).all(|n| count(n) < 1 << 63), "a count started at 2^63 or more");
    assert!(again.chunks(3).all(|c| count(&c[1]) == count(&c[0]) + 1), "an instance counts up by one");

    // The key's last numbers: two instances, then none.
    std::fs::write(&path, format!("{HEADER}\n{} {}\n", KeyId::of(&key), NUMBERS - 2)).unwrap();
    let space = KeySpace::with_ledger(key, Arc::new(Ledger::new(&path)));
    let last: Vec<u32> = (0..2).map(|_| AesTask::new(&space).unwrap().instance()).collect();
    assert_eq!(last, [u32::MAX - 1, u32::MAX]);
    let e = AesTask::new(&space).unwrap_err();
    assert_eq!(e, InstanceError::Exhausted(KeyId::of(&key)));
    assert!(e.to_string().starts_with("nonces_exhausted"), "{e}");
    std::fs::remove_dir_all(&dir).unwrap();

    let random = KeySpace::random(key);
    let firsts: HashSet<(u32, Vec<u8>)> = (0..8)
        .map(|_| {
            let mut t = AesTask::new(&random).unwrap();
            let mut f = udp(b"x");
            t.seal(&mut f).unwrap();
            (t.instance(), payload(&f)[..NONCE_LEN].to_vec())
        })
        .collect();
    assert_eq!(firsts.len(), 8, "random instances differ");
    let refused = KeySpace::refused(key, "no ledger here".into());
    assert_eq!(AesTask::new(&refused).unwrap_err().to_string(), "no nonces: no ledger here");
}

#[test]
fn other_keys_and_other_frames_are_dropped_by_name() {
    let (alice, bob) = (KeySpace::new([1; 32]), KeySpace::new([2; 32]));
    let mut a = AesTask::new(&alice).unwrap();
    let mut b = AesTask::new(&bob).unwrap();
    let mut f = udp(b"for alice");
    a.seal(&mut f).unwrap();
    assert_eq!(b.open(&mut f), Err(AesDrop::BadTag), "another tenant's key");
    assert_eq!(b.open(&mut udp(&[0; OVERHEAD - 1])), Err(AesDrop::BadTag), "shorter than nonce and tag");
    let mut t = Vec::new();
    build_tcp4(&mut t, [2; 6], [4; 6], [10, 0, 0, 1], [10, 0, 0, 2], 1, 2, 64, b"tcp");
    assert_eq!(a.seal(&mut t), Err(AesDrop::NotUdp4));
    assert_eq!(a.seal(&mut vec![0u8; 3]), Err(AesDrop::Malformed));
    let mut big = udp(&vec![0u8; MAX_IP_LEN - 28 - OVERHEAD + 1]);
    assert_eq!(a.seal(&mut big), Err(AesDrop::TooLarge));
    let mut fits = udp(&vec![0u8; MAX_IP_LEN - 28 - OVERHEAD]);
    a.seal(&mut fits).unwrap();
    assert_eq!(b.stats().drops, [0, 0, 0, 2, 0]);
    assert_eq!(a.stats().drops, [1, 1, 1, 0, 0]);
}
