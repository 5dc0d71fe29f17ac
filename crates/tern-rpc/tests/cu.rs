//! Compute units and their kernels: each kernel computes what its library computes when called
//! directly, a too-small output is a status, and a unit's rings hold up under concurrent
//! submitters, reconfiguration and refusals, its buffers all back in the device pool after.

use std::time::Duration;

use aes_gcm::aead::Aead;
use aes_gcm::{Aes256Gcm, KeyInit, Nonce};
use tern_rpc::cu::{ComputeUnit, DeviceBuf, Refused, UnitConfig};
use tern_rpc::decode::Pools;
use tern_rpc::kernel::{Codec, Kernel, KernelKind, SEAL_OVERHEAD, Sealer, Status, compress};

const KEY: [u8; 32] = [7; 32];

/// Text-like bytes (words from a small vocabulary, as logs and JSON are): compressible.
fn text(len: usize, seed: u64) -> Vec<u8> {
    const WORDS: [&str; 12] =
        ["user", "photo", "id", "\"avatar\":", "1024", "true", "{", "}", "name", "bytes", ", ", "2026-11-25"];
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    let mut out = Vec::with_capacity(len + 16);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(WORDS[(x % WORDS.len() as u64) as usize].as_bytes());
        out.push(b' ');
    }
    out.truncate(len);
    out
}

/// Incompressible bytes.
fn noise(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn payloads() -> Vec<Vec<u8>> {
    vec![Vec::new(), b"a".to_vec(), text(100, 1), text(5000, 2), text(300_000, 3), noise(4096, 4), noise(70_000, 5)]
}

fn zstd_decode(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    let mut d = ruzstd::decoding::StreamingDecoder::new(b).unwrap();
    std::io::Read::read_to_end(&mut d, &mut out).unwrap();
    out
}

#[test]
fn kernels_compute_what_their_libraries_compute() {
    for p in payloads() {
        let mut out = Vec::new();
        // LZ4: the length, then the block as lz4_flex makes it.
        let k = KernelKind::Compress(Codec::Lz4);
        assert_eq!(compress(Codec::Lz4, &p, &mut out, k.max_output(p.len())), Status::Ok);
        let mut want = (p.len() as u32).to_le_bytes().to_vec();
        want.extend(lz4_flex::block::compress(&p));
        assert_eq!(out, want);
        assert_eq!(lz4_flex::block::decompress_size_prepended(&out).unwrap(), p);
        // zstd: ruzstd's frame, which decodes back.
        let k = KernelKind::Compress(Codec::Zstd);
        assert_eq!(compress(Codec::Zstd, &p, &mut out, k.max_output(p.len())), Status::Ok);
        assert_eq!(out, ruzstd::encoding::compress_to_vec(p.as_slice(), ruzstd::encoding::CompressionLevel::Fastest));
        assert_eq!(zstd_decode(&out), p);
        // AES-256-GCM: nonce, then what aes-gcm seals with it; opens back; a changed byte or a
        // short input does not open.
        let mut s = Sealer::with_prefix(&KEY, [1, 2, 3, 4]);
        assert_eq!(s.seal(&p, &mut out, p.len() + SEAL_OVERHEAD), Status::Ok);
        let nonce = [1, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0];
        let mut want = nonce.to_vec();
        want.extend(Aes256Gcm::new(&KEY.into()).encrypt(Nonce::from_slice(&nonce), p.as_slice()).unwrap());
        assert_eq!(out, want);
        let sealed = out.clone();
        let mut opened = Vec::new();
        assert_eq!(s.open(&sealed, &mut opened, p.len()), Status::Ok);
        assert_eq!(opened, p);
        let mut bad = sealed.clone();
        let at = bad.len() / 2;
        bad[at] ^= 1;
        assert_eq!(s.open(&bad, &mut opened, p.len()), Status::AuthFailed);
        assert!(opened.is_empty());
        assert_eq!(s.open(&sealed[..SEAL_OVERHEAD - 1], &mut opened, 1 << 20), Status::AuthFailed);
        // Compress, then seal: opens and decompresses back.
        for c in [Codec::Lz4, Codec::Zstd] {
            let kind = KernelKind::CompressSeal(c);
            let mut k = Kernel::with_sealer(kind, Some(Sealer::with_prefix(&KEY, [9; 4])));
            assert_eq!(k.run(&p, &mut out, kind.max_output(p.len())), Status::Ok);
            let mut plain = Vec::new();
            assert_eq!(Sealer::with_prefix(&KEY, [0; 4]).open(&out, &mut plain, out.len()), Status::Ok);
            let back = match c {
                Codec::Lz4 => lz4_flex::block::decompress_size_prepended(&plain).unwrap(),
                Codec::Zstd => zstd_decode(&plain),
            };
            assert_eq!(back, p);
        }
    }
    // The text compresses (what the image service's payloads are chosen for); noise does not.
    let (t, n) = (text(300_000, 3), noise(70_000, 5));
    let mut out = Vec::new();
    compress(Codec::Lz4, &t, &mut out, t.len() * 2);
    assert!(out.len() * 2 < t.len(), "text compresses 2x or more: {} of {}", out.len(), t.len());
    compress(Codec::Zstd, &n, &mut out, n.len() * 2);
    assert!(out.len() >= n.len());
}

/// Every kind writes at most the capacity it is given: one byte short of what it needs is a
/// status with nothing written, never a panic; `max_output` always suffices.
#[test]
fn a_too_small_output_is_a_status() {
    for p in payloads() {
        for kind in KernelKind::ALL {
            let key = kind.keyed().then_some(&KEY);
            let mut k = Kernel::new(kind, key).unwrap();
            // Open reads sealed bytes.
            let input = if kind == KernelKind::Open {
                let mut sealed = Vec::new();
                Sealer::with_prefix(&KEY, [0; 4]).seal(&p, &mut sealed, p.len() + SEAL_OVERHEAD);
                sealed
            } else {
                p.clone()
            };
            let mut out = Vec::new();
            assert_eq!(k.run(&input, &mut out, kind.max_output(input.len())), Status::Ok, "{kind} on {}", p.len());
            let need = out.len();
            if need == 0 {
                continue;
            }
            for cap in [0, need / 2, need - 1] {
                let mut small = Vec::new();
                assert_eq!(k.run(&input, &mut small, cap), Status::OutputTooSmall, "{kind}, {cap} of {need}");
                assert!(small.len() <= cap);
            }
        }
    }
    assert!(Kernel::new(KernelKind::Seal, None).unwrap_err().contains("aes-gcm-seal"));
}

#[test]
fn a_sealers_nonces_never_repeat() {
    let mut s = Sealer::new(&KEY);
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    for _ in 0..2000 {
        s.seal(b"x", &mut out, 64);
        assert!(seen.insert(out[..12].to_vec()), "a nonce used twice");
    }
    // Two sealers of one key (a unit programmed twice) start at random counters too, not both
    // at 0: their first nonces differ past the prefix (equal by chance once in 2^64).
    let first = |s: &mut Sealer| {
        let mut out = Vec::new();
        s.seal(b"x", &mut out, 64);
        out[4..12].to_vec()
    };
    assert_ne!(first(&mut Sealer::new(&KEY)), first(&mut Sealer::new(&KEY)));
}

#[test]
fn kernel_names_parse_back() {
    for k in KernelKind::ALL {
        assert_eq!(k.name().parse::<KernelKind>(), Ok(k));
    }
    let e = "gzip".parse::<KernelKind>().unwrap_err();
    assert!(e.contains("`gzip`") && e.contains("lz4"), "{e}");
}

fn task(unit: &ComputeUnit, pools: &Pools, input: &[u8], cap: usize) -> Result<tern_rpc::cu::TaskHandle, Refused> {
    let i = DeviceBuf::from_slice(pools, input).unwrap();
    let o = DeviceBuf::alloc(pools, cap).unwrap();
    unit.submit_task(i, input.len(), o).map_err(|r| r.reason)
}

#[test]
fn a_unit_runs_its_kernel_on_device_buffers() {
    let pools = Pools::new(4096, 1024);
    let unit = ComputeUnit::new(UnitConfig::default()).unwrap();
    // No kernel yet.
    assert_eq!(unit.kind(), None);
    assert_eq!(task(&unit, &pools, b"abc", 64).unwrap_err(), Refused::Unavailable);
    unit.program(Some(Kernel::new(KernelKind::Compress(Codec::Lz4), None).unwrap()));
    assert_eq!(unit.kind(), Some(KernelKind::Compress(Codec::Lz4)));
    let p = text(20_000, 7);
    let h = task(&unit, &pools, &p, KernelKind::Compress(Codec::Lz4).max_output(p.len())).unwrap();
    let c = unit.poll(h);
    assert_eq!(c.status, Status::Ok);
    assert_eq!(&c.output.as_slice()[..c.length], &lz4_flex::block::compress_prepend_size(&p)[..]);
    assert_eq!(c.input.as_slice(), &p[..]);
    // Too small an output: a status, the buffers back.
    let h = task(&unit, &pools, &p, 100).unwrap();
    let small = unit.poll(h);
    assert_eq!((small.status, small.length), (Status::OutputTooSmall, 0));
    // A length past the input is refused.
    let i = DeviceBuf::from_slice(&pools, b"abc").unwrap();
    let o = DeviceBuf::alloc(&pools, 64).unwrap();
    assert_eq!(unit.submit_task(i, 4, o).unwrap_err().reason, Refused::BadLength);
    let st = unit.stats();
    assert_eq!((st.submitted, st.done[Status::Ok as usize], st.done[Status::OutputTooSmall as usize]), (2, 1, 1));
    assert_eq!((st.refused[Refused::Unavailable as usize], st.refused[Refused::BadLength as usize]), (1, 1));
    drop((c, small));
    assert_eq!(pools.device.outstanding(), 0, "every device chunk back");
    assert_eq!(pools.host.outstanding(), 0, "units take no host memory");
    // The device pool's limit holds for buffers too.
    let tiny = Pools::new(4096, 2);
    let a = DeviceBuf::alloc(&tiny, 8192).unwrap();
    assert!(DeviceBuf::alloc(&tiny, 1).is_none());
    drop(a);
    assert!(DeviceBuf::alloc(&tiny, 1).is_some());
}

#[test]
fn rings_hold_as_many_tasks_as_entries_until_polled() {
    let pools = Pools::default();
    let unit = ComputeUnit::new(UnitConfig { ring_entries: 2, ..UnitConfig::default() }).unwrap();
    unit.program(Some(Kernel::new(KernelKind::Compress(Codec::Lz4), None).unwrap()));
    let a = task(&unit, &pools, b"one", 64).unwrap();
    let b = task(&unit, &pools, b"two", 64).unwrap();
    // Both may be done, but their notification entries are held until polled.
    assert_eq!(task(&unit, &pools, b"three", 64).unwrap_err(), Refused::RingFull);
    let done = unit.poll(a);
    assert_eq!(done.status, Status::Ok);
    let c = task(&unit, &pools, b"three", 64).unwrap();
    for h in [b, c] {
        assert_eq!(unit.poll(h).status, Status::Ok);
    }
    assert_eq!(unit.stats().refused[Refused::RingFull as usize], 1);
}

#[test]
fn reprogramming_refuses_tasks_for_its_time_and_queued_ones_finish_on_the_old_kernel() {
    let pools = Pools::default();
    // Long enough that the checks right after programming fall inside it on a loaded machine.
    let unit = ComputeUnit::new(UnitConfig { ring_entries: 64, reconfigure: Duration::from_millis(300) }).unwrap();
    let in_service = |unit: &ComputeUnit| {
        let t0 = std::time::Instant::now();
        while unit.kind().is_none() {
            assert!(t0.elapsed() < Duration::from_secs(10), "back in service");
            std::thread::sleep(Duration::from_millis(5));
        }
    };
    // zstd first (the slower kernel, so that tasks are still queued when it is replaced).
    unit.program(Some(Kernel::new(KernelKind::Compress(Codec::Zstd), None).unwrap()));
    in_service(&unit);
    let p = text(1 << 20, 11);
    let cap = 2 * p.len();
    let before: Vec<_> = (0..8).map(|_| task(&unit, &pools, &p, cap).unwrap()).collect();
    unit.program(Some(Kernel::new(KernelKind::Compress(Codec::Lz4), None).unwrap()));
    // Out of service now: refused and counted, no kind.
    assert_eq!(unit.kind(), None);
    assert_eq!(task(&unit, &pools, &p, cap).unwrap_err(), Refused::Reconfiguring);
    for h in before {
        let c = unit.poll(h);
        assert_eq!(zstd_decode(&c.output.as_slice()[..c.length]), p, "submitted before: the old kernel");
    }
    // In service again after the reconfiguration time, with the new kernel.
    in_service(&unit);
    assert_eq!(unit.kind(), Some(KernelKind::Compress(Codec::Lz4)));
    let c = unit.poll(task(&unit, &pools, &p, cap).unwrap());
    assert_eq!(&c.output.as_slice()[..c.length], &lz4_flex::block::compress_prepend_size(&p)[..]);
    // Programmed with nothing: unavailable.
    unit.program(None);
    std::thread::sleep(Duration::from_millis(350));
    assert_eq!(task(&unit, &pools, &p, cap).unwrap_err(), Refused::Unavailable);
    let st = unit.stats();
    assert_eq!((st.refused[Refused::Reconfiguring as usize], st.programs), (1, 3));
}

/// Programmed three times while it is busy, a unit runs each queued task on the kernel it was
/// submitted to, not on the newest one.
#[test]
fn each_task_runs_on_the_kernel_it_was_submitted_to() {
    let pools = Pools::default();
    let unit = ComputeUnit::new(UnitConfig::default()).unwrap();
    let zstd = || Some(Kernel::new(KernelKind::Compress(Codec::Zstd), None).unwrap());
    unit.program(zstd());
    // A long task keeps the unit busy while the rest are queued.
    let big = text(2 << 20, 1);
    let busy = task(&unit, &pools, &big, 2 * big.len()).unwrap();
    let p = text(10_000, 2);
    unit.program(Some(Kernel::new(KernelKind::Compress(Codec::Lz4), None).unwrap()));
    let lz4_task = task(&unit, &pools, &p, 2 * p.len()).unwrap();
    unit.program(zstd());
    let zstd_task = task(&unit, &pools, &p, 2 * p.len()).unwrap();
    assert_eq!(zstd_decode(unit.poll(busy).output.as_slice()), big);
    let c = unit.poll(lz4_task);
    assert_eq!(&c.output.as_slice()[..c.length], &lz4_flex::block::compress_prepend_size(&p)[..]);
    let c = unit.poll(zstd_task);
    assert_eq!(zstd_decode(&c.output.as_slice()[..c.length]), p);
}

/// Four submitters share one unit with a small ring (refusals common) while a fifth thread
/// reprograms it with the same kind now and then: every task accepted finishes once with its own
/// result, refusals are counted as seen, and every device chunk comes back.
#[test]
fn concurrent_submitters_get_their_own_results() {
    let pools = Pools::new(4096, 4096);
    let unit = ComputeUnit::new(UnitConfig { ring_entries: 4, reconfigure: Duration::from_micros(200) }).unwrap();
    let lz4 = || Some(Kernel::new(KernelKind::Compress(Codec::Lz4), None).unwrap());
    unit.program(lz4());
    std::thread::sleep(Duration::from_millis(1));
    // Submitters that have ended (a failed one too: the reprogrammer stops when all have).
    struct Ended<'a>(&'a std::sync::atomic::AtomicUsize);
    impl Drop for Ended<'_> {
        fn drop(&mut self) {
            self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
    }
    let ended = std::sync::atomic::AtomicUsize::new(0);
    let refusals: Vec<[u64; 4]> = std::thread::scope(|s| {
        s.spawn(|| {
            while ended.load(std::sync::atomic::Ordering::Relaxed) < 4 {
                std::thread::sleep(Duration::from_millis(2));
                unit.program(lz4());
            }
        });
        let workers: Vec<_> = (0..4u64)
            .map(|t| {
                let (unit, pools, ended) = (&unit, &pools, &ended);
                s.spawn(move || {
                    let _ended = Ended(ended);
                    let mut refused = [0u64; 4];
                    let mut done = 0;
                    let mut i = 0u64;
                    while done < 300 {
                        let p = text(100 + (i as usize * 37 + t as usize * 101) % 9000, t * 1000 + i);
                        i += 1;
                        match task(unit, pools, &p, 2 * p.len() + 64) {
                            Ok(h) => {
                                let c = unit.poll(h);
                                assert_eq!(c.status, Status::Ok);
                                assert_eq!(c.input.as_slice(), &p[..], "its own input back");
                                let back = lz4_flex::block::decompress_size_prepended(&c.output.as_slice()[..c.length]);
                                assert_eq!(back.unwrap(), p, "its own result");
                                done += 1;
                            }
                            Err(r) => {
                                refused[r as usize] += 1;
                                std::thread::yield_now();
                            }
                        }
                    }
                    refused
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().unwrap()).collect()
    });
    let st = unit.stats();
    assert_eq!(st.submitted, 1200);
    assert_eq!(st.done.iter().sum::<u64>(), 1200);
    for (i, r) in Refused::ALL.iter().enumerate() {
        assert_eq!(st.refused[i], refusals.iter().map(|x| x[*r as usize]).sum::<u64>(), "{r:?} refusals");
    }
    assert_eq!(pools.device.outstanding(), 0);
}

/// The profile's units: 4 on the U280, each its own thread and ring, unprogrammed.
#[test]
fn a_profile_has_its_units() {
    let u280 = tern_hw::Profile::builtin("rpcnic-u280").unwrap();
    let units = tern_rpc::cu::units_for(&u280, UnitConfig::default()).unwrap();
    assert_eq!(units.len(), 4);
    assert!(units.iter().all(|u| u.kind().is_none()));
    let cpu = tern_hw::Profile::builtin("cpu").unwrap();
    assert_eq!(tern_rpc::cu::units_for(&cpu, UnitConfig::default()).unwrap().len(), 1);
}
