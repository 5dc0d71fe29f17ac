//! Large lookup arrays backed by transparent huge pages.
//!
//! The IPv4 LPM root is 64 MiB indexed by an address's first 24 bits, so lookups of spread-out
//! addresses touch a different 4 KiB page almost every time and each takes a TLB miss. Asking
//! the kernel for 2 MiB pages (`madvise(MADV_HUGEPAGE)`, before the array is first written)
//! covers the root with 32 TLB entries instead of 16,384. Where the kernel has transparent huge
//! pages off (or on another system) the advice is refused and the array works as before. (A
//! large zeroed allocation is a fresh, untouched mapping with glibc's allocator; one that hands
//! out touched memory leaves the kernel to collapse the pages into huge ones later.)

/// `n` zeroed words, advised onto huge pages when they span at least one.
pub(crate) fn zeroed_u32s(n: usize) -> Vec<u32> {
    let v = vec![0u32; n];
    advise_huge(&v);
    v
}

/// Bytes of a huge page (x86-64, AArch64 with 4 KiB base pages).
const HUGE: usize = 2 << 20;
/// Bytes of a base page.
const PAGE: usize = 4096;

/// Advises the kernel to back `v`'s whole base pages with huge pages. Returns whether it took
/// the advice (false for a slice under a huge page, off Linux, or with THP disabled).
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
pub(crate) fn advise_huge(v: &[u32]) -> bool {
    let start = v.as_ptr() as usize;
    let end = start + std::mem::size_of_val(v);
    // madvise needs a page-aligned start; only whole pages inside the allocation are advised.
    let first = start.next_multiple_of(PAGE);
    let last = end - end % PAGE;
    if last < first + HUGE {
        return false;
    }
    // SAFETY: [first, last) lies inside `v`'s allocation, which this process owns and keeps
    // mapped for as long as `v` lives. MADV_HUGEPAGE changes only how the kernel backs the
    // range, never its contents or whether it is mapped; the pointer is not dereferenced.
    unsafe { libc::madvise(first as *mut libc::c_void, last - first, libc::MADV_HUGEPAGE) == 0 }
}

/// See the Linux version: no advice elsewhere.
#[cfg(not(target_os = "linux"))]
pub(crate) fn advise_huge(_v: &[u32]) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether this kernel offers transparent huge pages to regions that ask.
    fn thp_offered() -> bool {
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled")
            .is_ok_and(|s| s.contains("[always]") || s.contains("[madvise]"))
    }

    /// Kilobytes of huge pages backing the mapping that holds `addr` (/proc/self/smaps).
    fn huge_kb_at(addr: usize) -> Option<u64> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut inside = false;
        for line in smaps.lines() {
            let range = line.split_whitespace().next().and_then(|r| r.split_once('-'));
            if let Some((a, b)) = range.filter(|(a, _)| !a.ends_with(':'))
                && let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
            {
                inside = (a..b).contains(&addr);
            } else if inside && let Some(kb) = line.strip_prefix("AnonHugePages:") {
                return kb.trim().trim_end_matches("kB").trim().parse().ok();
            }
        }
        None
    }

    #[test]
    fn a_large_array_is_advised_and_stays_zeroed_and_writable() {
        let mut v = zeroed_u32s(1 << 22);
        if cfg!(target_os = "linux") && thp_offered() {
            assert!(advise_huge(&v), "the kernel offers THP, so the advice is taken");
            // Writing one word per huge page faults them in as huge pages.
            for i in (0..v.len()).step_by(HUGE / 4) {
                v[i] = 1;
            }
            let kb = huge_kb_at(v.as_ptr() as usize + HUGE);
            assert!(kb.is_some_and(|kb| kb >= 2048), "huge pages back the array: {kb:?} kB");
            v.fill(0);
        }
        assert!(v.iter().step_by(1021).all(|&x| x == 0));
        v[12345] = 7;
        v[(1 << 22) - 1] = 9;
        assert_eq!((v[12345], v[(1 << 22) - 1]), (7, 9));
    }

    #[test]
    fn an_array_under_a_huge_page_is_not_advised() {
        assert!(!advise_huge(&vec![0u32; 1000]));
        assert!(!advise_huge(&[]));
    }
}
