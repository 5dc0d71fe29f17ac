//! DPDK's `rte_lpm` and `rte_hash` beside tern-table's [`Lpm4`](tern_table::lpm::Lpm4) and
//! [`ExactMatch`](tern_table::em::ExactMatch), on the same entries and the same lookup keys, for
//! `tern bench flow --against-dpdk` (AccelSDP issue point: Tern's tables at least as fast as
//! DPDK's).
//!
//! Only with the `dpdk` feature, which links the system DPDK (Debian: `apt-get install
//! libdpdk-dev pkg-config`) through a small C shim (`csrc/shim.c`: DPDK's bulk lookups are
//! inline functions and macros). The EAL runs with `--no-huge --no-pci --no-shconf`: no
//! hugepages, devices or root needed. Without the feature, [`compare`] says how to get it.
#![cfg_attr(not(feature = "dpdk"), forbid(unsafe_code))]

/// One table compared: lookups per second of each, median over the rounds.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// `lpm4` or `em`.
    pub table: &'static str,
    /// `1k_random`, `100k_realistic` (LPM) or `1k`, `100k` (EM).
    pub size: &'static str,
    /// Entries in both tables.
    pub entries: usize,
    /// Tern's lookups per second.
    pub tern_per_s: f64,
    /// DPDK's lookups per second.
    pub dpdk_per_s: f64,
    /// Keys whose answers differed between the two (must be 0).
    pub mismatches: usize,
}

impl Comparison {
    /// Tern over DPDK.
    pub fn ratio(&self) -> f64 {
        self.tern_per_s / self.dpdk_per_s.max(1.0)
    }
}

/// Whether this build can run DPDK.
pub const AVAILABLE: bool = cfg!(feature = "dpdk");

/// Lookup keys per table, and keys per bulk call (both sides).
pub const LOOKUPS: usize = 4096;
/// See [`LOOKUPS`].
pub const BULK: usize = 32;

#[cfg(not(feature = "dpdk"))]
/// Compares the tables (needs the `dpdk` feature).
pub fn compare(_rounds: usize, _secs: f64) -> Result<Vec<Comparison>, String> {
    Err("this build has no DPDK: install it (Debian: apt-get install libdpdk-dev pkg-config) and \
         build with `cargo run --release --features dpdk -- bench flow --against-dpdk`"
        .into())
}

#[cfg(feature = "dpdk")]
mod ffi;

#[cfg(feature = "dpdk")]
pub use imp::compare;

#[cfg(feature = "dpdk")]
mod imp {
    use std::hint::black_box;
    use std::net::Ipv4Addr;
    use std::time::{Duration, Instant};

    use ipnet::Ipv4Net;
    use tern_table::em::{ExactMatch, FiveTuple4, PackedTuple4, Seed};
    use tern_table::lpm::Lpm4;
    use tern_table::workload;

    use super::{BULK, Comparison, LOOKUPS};
    use crate::ffi::{DpdkHash, DpdkLpm, Key};

    fn median(mut v: Vec<f64>) -> f64 {
        v.sort_by(f64::total_cmp);
        v.get(v.len() / 2).copied().unwrap_or(0.0)
    }

    /// Runs `f` (one pass over the keys) for `time`; lookups per second.
    fn rate(time: Duration, mut f: impl FnMut() -> u64) -> f64 {
        let start = Instant::now();
        let (mut n, mut sink) = (0u64, 0u64);
        while start.elapsed() < time {
            sink = sink.wrapping_add(f());
            n += LOOKUPS as u64;
        }
        black_box(sink);
        n as f64 / start.elapsed().as_secs_f64()
    }

    fn alternate(rounds: usize, time: Duration, mut a: impl FnMut() -> u64, mut b: impl FnMut() -> u64) -> (f64, f64) {
        // Warm both (caches, branch predictors) before measuring.
        rate(time / 4, &mut a);
        rate(time / 4, &mut b);
        let (mut x, mut y) = (Vec::new(), Vec::new());
        for r in 0..rounds.max(1) {
            if r % 2 == 0 {
                x.push(rate(time, &mut a));
                y.push(rate(time, &mut b));
            } else {
                y.push(rate(time, &mut b));
                x.push(rate(time, &mut a));
            }
        }
        (median(x), median(y))
    }

    fn lpm(name: &'static str, prefixes: &[(u32, u32)], rounds: usize, time: Duration) -> Result<Comparison, String> {
        let mut tern = Lpm4::new();
        let mut dpdk = DpdkLpm::new(&format!("tern_{name}"), prefixes.len() as u32 + 16, 1 << 16)?;
        for (i, &(a, len)) in prefixes.iter().enumerate() {
            tern.insert(Ipv4Net::new_assert(Ipv4Addr::from(a), len as u8), i as u32).map_err(|e| e.to_string())?;
            dpdk.add(a, len as u8, i as u32)?;
        }
        let keys = workload::ipv4_lookups(prefixes, LOOKUPS, 900, 3);
        // Both sides produce raw entries the caller decodes when it uses them (DPDK's API).
        let mut t_out = vec![0u32; LOOKUPS];
        let mut d_out = vec![0u32; LOOKUPS];
        tern.lookup_batch_raw(&keys, &mut t_out);
        for (k, o) in keys.chunks(BULK).zip(d_out.chunks_mut(BULK)) {
            dpdk.lookup_bulk(k, o);
        }
        let mismatches = t_out.iter().zip(&d_out).filter(|(t, d)| Lpm4::decode(**t) != DpdkLpm::decode(**d)).count();
        let (t, d) = alternate(
            rounds,
            time,
            || {
                for (k, o) in keys.chunks(BULK).zip(t_out.chunks_mut(BULK)) {
                    tern.lookup_batch_raw(black_box(k), o);
                }
                u64::from(t_out[LOOKUPS - 1])
            },
            || {
                for (k, o) in keys.chunks(BULK).zip(d_out.chunks_mut(BULK)) {
                    dpdk.lookup_bulk(black_box(k), o);
                }
                u64::from(d_out[LOOKUPS - 1])
            },
        );
        Ok(Comparison { table: "lpm4", size: name, entries: prefixes.len(), tern_per_s: t, dpdk_per_s: d, mismatches })
    }

    fn em(name: &'static str, n: usize, rounds: usize, time: Duration) -> Result<Comparison, String> {
        let keys = workload::five_tuples4(n, 1);
        let mut tern = ExactMatch::with_seed(Seed::from_u64(9));
        let mut dpdk = DpdkHash::new(&format!("tern_em_{name}"), (n as u32 * 2).max(1024))?;
        // Each side holds the keys in its own form: Tern's OFU table packs the tuple
        // ([`PackedTuple4`]), DPDK's hash takes bytes.
        for (i, k) in keys.iter().enumerate() {
            tern.insert(PackedTuple4::from(*k), i as u32);
            dpdk.add(&Key::from(k), i as u32)?;
        }
        let mut fresh = 0u32;
        let look = workload::em_lookups(&keys, LOOKUPS, 900, 2, |_| {
            fresh += 1;
            FiveTuple4 { src: 0xc000_0200 ^ fresh, dst: 0x0a00_0000 | fresh, proto: 17, src_port: 1, dst_port: 2 }
        });
        let dkeys: Vec<Key> = look.iter().map(Key::from).collect();
        let look: Vec<PackedTuple4> = look.into_iter().map(PackedTuple4::from).collect();
        let ptrs: Vec<*const Key> = dkeys.iter().map(|k| k as *const Key).collect();
        let mut t_out = vec![None; LOOKUPS];
        let mut d_out = vec![None; LOOKUPS];
        tern.lookup_batch(&look, &mut t_out);
        for (k, o) in ptrs.chunks(BULK).zip(d_out.chunks_mut(BULK)) {
            dpdk.lookup_bulk(k, o);
        }
        let mismatches = t_out.iter().zip(&d_out).filter(|(t, d)| t != d).count();
        let (t, d) = alternate(
            rounds,
            time,
            || {
                for (k, o) in look.chunks(BULK).zip(t_out.chunks_mut(BULK)) {
                    tern.lookup_batch(black_box(k), o);
                }
                u64::from(t_out[LOOKUPS - 1].unwrap_or(0))
            },
            || {
                for (k, o) in ptrs.chunks(BULK).zip(d_out.chunks_mut(BULK)) {
                    dpdk.lookup_bulk(black_box(k), o);
                }
                u64::from(d_out[LOOKUPS - 1].unwrap_or(0))
            },
        );
        Ok(Comparison { table: "em", size: name, entries: n, tern_per_s: t, dpdk_per_s: d, mismatches })
    }

    /// Compares on the AccelSDP evaluation's 1K random prefixes and a 100K-prefix table with a
    /// realistic length mix, and on 1K and 100K 5-tuples; `rounds` alternating runs of `secs`.
    pub fn compare(rounds: usize, secs: f64) -> Result<Vec<Comparison>, String> {
        crate::ffi::init()?;
        let time = Duration::from_secs_f64(secs);
        Ok(vec![
            lpm("1k_random", &workload::ipv4_prefixes(1000, &[], 1), rounds, time)?,
            lpm("100k_realistic", &workload::ipv4_prefixes(100_000, workload::IPV4_LENGTH_MIX, 2), rounds, time)?,
            em("1k", 1000, rounds, time)?,
            em("100k", 100_000, rounds, time)?,
        ])
    }
}

#[cfg(test)]
mod tests {
    #[cfg(not(feature = "dpdk"))]
    #[test]
    fn without_the_feature_it_says_how_to_get_it() {
        let e = super::compare(1, 0.01).unwrap_err();
        assert!(e.contains("libdpdk-dev") && e.contains("--features dpdk"), "{e}");
    }

    #[cfg(feature = "dpdk")]
    #[test]
    fn both_sides_answer_alike() {
        let r = super::compare(1, 0.01).unwrap();
        assert_eq!(r.len(), 4);
        for c in &r {
            assert_eq!(c.mismatches, 0, "{c:?}");
            assert!(c.tern_per_s > 0.0 && c.dpdk_per_s > 0.0, "{c:?}");
        }
    }
}
