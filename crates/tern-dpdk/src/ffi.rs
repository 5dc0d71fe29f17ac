//! The C shim's functions and safe owners of the DPDK tables.

use std::ffi::{CStr, CString, c_char, c_int, c_uint, c_void};
use std::sync::OnceLock;

use tern_table::em::FiveTuple4;

unsafe extern "C" {
    fn tern_dpdk_init(mem_mb: c_uint) -> c_int;
    fn tern_dpdk_strerror(err: c_int) -> *const c_char;
    fn tern_lpm_create(name: *const c_char, max_rules: u32, tbl8s: u32) -> *mut c_void;
    fn tern_lpm_add(lpm: *mut c_void, ip: u32, depth: u8, next_hop: u32) -> c_int;
    fn tern_lpm_lookup_bulk(lpm: *const c_void, ips: *const u32, next_hops: *mut u32, n: c_uint);
    fn tern_lpm_free(lpm: *mut c_void);
    fn tern_hash_create(name: *const c_char, entries: u32) -> *mut c_void;
    fn tern_hash_add(h: *mut c_void, key: *const Key, value: u32) -> c_int;
    fn tern_hash_lookup_bulk(h: *const c_void, keys: *const *const Key, n: c_uint, values: *mut u32) -> u64;
    fn tern_hash_free(h: *mut c_void);
}

fn strerror(e: c_int) -> String {
    // SAFETY: rte_strerror returns a pointer to a NUL-terminated static or thread-local string.
    unsafe { CStr::from_ptr(tern_dpdk_strerror(e)) }.to_string_lossy().into_owned()
}

/// Initializes the EAL once per process (1 GiB of ordinary memory, no hugepages or devices).
pub fn init() -> Result<(), String> {
    static INIT: OnceLock<Result<(), String>> = OnceLock::new();
    INIT.get_or_init(|| {
        // SAFETY: called once (OnceLock) before any other DPDK function.
        let r = unsafe { tern_dpdk_init(1024) };
        if r == 0 { Ok(()) } else { Err(format!("DPDK EAL init failed: {}", strerror(r))) }
    })
    .clone()
}

/// The 5-tuple as DPDK's l3fwd keys its hash (16 bytes, padded); layout as `csrc/shim.c`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Key {
    ip_dst: u32,
    ip_src: u32,
    port_dst: u16,
    port_src: u16,
    proto: u8,
    pad: [u8; 3],
}

impl From<&FiveTuple4> for Key {
    fn from(t: &FiveTuple4) -> Key {
        Key { ip_dst: t.dst, ip_src: t.src, port_dst: t.dst_port, port_src: t.src_port, proto: t.proto, pad: [0; 3] }
    }
}

/// An `rte_lpm` table.
#[derive(Debug)]
pub struct DpdkLpm(*mut c_void);

impl DpdkLpm {
    /// Creates a table (`init` first).
    pub fn new(name: &str, max_rules: u32, tbl8s: u32) -> Result<DpdkLpm, String> {
        let c = CString::new(name).map_err(|e| e.to_string())?;
        // SAFETY: `c` is NUL-terminated and outlives the call; a null result is checked.
        let p = unsafe { tern_lpm_create(c.as_ptr(), max_rules, tbl8s) };
        if p.is_null() { Err(format!("rte_lpm_create({name}) failed")) } else { Ok(DpdkLpm(p)) }
    }

    /// Adds a prefix (address in host order).
    pub fn add(&mut self, ip: u32, depth: u8, next_hop: u32) -> Result<(), String> {
        // SAFETY: self.0 is a live table owned by self.
        let r = unsafe { tern_lpm_add(self.0, ip, depth, next_hop) };
        if r == 0 { Ok(()) } else { Err(format!("rte_lpm_add({ip:#x}/{depth}): {}", strerror(r))) }
    }

    /// `rte_lpm_lookup_bulk`: `out[i]` holds the next hop with the success flag on a hit.
    #[inline]
    pub fn lookup_bulk(&self, ips: &[u32], out: &mut [u32]) {
        let n = ips.len().min(out.len());
        // SAFETY: the table is live; `ips` and `out` hold at least `n` elements.
        unsafe { tern_lpm_lookup_bulk(self.0, ips.as_ptr(), out.as_mut_ptr(), n as c_uint) }
    }

    /// The next hop in a bulk lookup's answer, if it is a hit.
    pub fn decode(v: u32) -> Option<u32> {
        (v & 0x0100_0000 != 0).then_some(v & 0x00ff_ffff)
    }
}

impl Drop for DpdkLpm {
    fn drop(&mut self) {
        // SAFETY: self.0 is live and freed once.
        unsafe { tern_lpm_free(self.0) }
    }
}

/// An `rte_hash` table on [`Key`] with CRC hashing, values stored in the table.
#[derive(Debug)]
pub struct DpdkHash(*mut c_void);

impl DpdkHash {
    /// Creates a table (`init` first).
    pub fn new(name: &str, entries: u32) -> Result<DpdkHash, String> {
        let c = CString::new(name).map_err(|e| e.to_string())?;
        // SAFETY: `c` is NUL-terminated and outlives the call; a null result is checked.
        let p = unsafe { tern_hash_create(c.as_ptr(), entries) };
        if p.is_null() { Err(format!("rte_hash_create({name}) failed")) } else { Ok(DpdkHash(p)) }
    }

    /// Adds a key with its value.
    pub fn add(&mut self, key: &Key, value: u32) -> Result<(), String> {
        // SAFETY: the table is live; `key` points at a 16-byte key.
        let r = unsafe { tern_hash_add(self.0, key, value) };
        if r == 0 { Ok(()) } else { Err(format!("rte_hash_add_key_data: {}", strerror(r))) }
    }

    /// `rte_hash_lookup_bulk_data` over up to 64 keys.
    #[inline]
    pub fn lookup_bulk(&self, keys: &[*const Key], out: &mut [Option<u32>]) {
        let n = keys.len().min(out.len()).min(64);
        let mut values = [0u32; 64];
        // SAFETY: the table is live; `keys[..n]` point at live keys; `values` holds 64.
        let hits = unsafe { tern_hash_lookup_bulk(self.0, keys.as_ptr(), n as c_uint, values.as_mut_ptr()) };
        for (i, o) in out.iter_mut().enumerate().take(n) {
            *o = (hits >> i & 1 == 1).then_some(values[i]);
        }
    }
}

impl Drop for DpdkHash {
    fn drop(&mut self) {
        // SAFETY: self.0 is live and freed once.
        unsafe { tern_hash_free(self.0) }
    }
}
