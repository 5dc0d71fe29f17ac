//! C++ protobuf as a peer (feature `cpp-protobuf`): protoc's generated code for every staged
//! workload, parsed on arenas, called through a small C shim built by `build.rs`.
//!
//! Each schema's package is renamed `tern_cpp_<workload>` in the copy protoc compiles (the six
//! HyperProtoBench schemas share the package `hyperprotobench`, and C++ registers every type of
//! a binary in one pool); [`CppType::new`] takes the workload and the original type name.

use std::ffi::c_void;

unsafe extern "C" {
    fn tern_cpp_prototype(name: *const u8, len: usize) -> *const c_void;
    fn tern_cpp_decode_arena(proto: *const c_void, data: *const u8, len: usize) -> i32;
    fn tern_cpp_parse(proto: *const c_void, data: *const u8, len: usize) -> *mut c_void;
    fn tern_cpp_encode(m: *mut c_void, out: *mut u8, cap: usize) -> usize;
    fn tern_cpp_free(m: *mut c_void);
}

/// A generated message type (its default instance, which C++ keeps for the whole run).
#[derive(Debug, Clone, Copy)]
pub struct CppType(*const c_void);

/// A message parsed by C++ protobuf, on the heap (freed when dropped).
#[derive(Debug)]
pub struct CppMessage(*mut c_void);

impl CppType {
    /// Type `ty` (e.g. `hyperprotobench.M1`) of `workload` (e.g. `bench0`), if compiled in.
    pub fn new(workload: &str, ty: &str) -> Option<CppType> {
        let short = ty.rsplit('.').next()?;
        let name = format!("tern_cpp_{workload}.{short}");
        // SAFETY: the shim reads `len` bytes from a live string; it returns a pointer to a
        // default instance that lives as long as the process, or null.
        let p = unsafe { tern_cpp_prototype(name.as_ptr(), name.len()) };
        (!p.is_null()).then_some(CppType(p))
    }

    /// Parses `bytes` into a message on a fresh arena (its first block a per-thread buffer),
    /// then frees the arena; whether the bytes parsed.
    pub fn decode_arena(&self, bytes: &[u8]) -> bool {
        // SAFETY: `self.0` is a live default instance; the shim reads `bytes.len()` bytes.
        unsafe { tern_cpp_decode_arena(self.0, bytes.as_ptr(), bytes.len()) == 1 }
    }

    /// Parses `bytes` into a message on the heap (`None` if they do not parse).
    pub fn parse(&self, bytes: &[u8]) -> Option<CppMessage> {
        // SAFETY: as in `decode_arena`; the result is owned by the returned value.
        let m = unsafe { tern_cpp_parse(self.0, bytes.as_ptr(), bytes.len()) };
        (!m.is_null()).then_some(CppMessage(m))
    }
}

impl CppMessage {
    /// Serializes the message, appending to `out` (written into its spare capacity, grown first
    /// when the message does not fit it).
    pub fn encode_into(&self, out: &mut Vec<u8>) {
        let spare = out.spare_capacity_mut();
        // SAFETY: the shim writes at most `spare.len()` bytes, and only when the whole message
        // fits; those bytes are then initialized.
        let n = unsafe { tern_cpp_encode(self.0, spare.as_mut_ptr().cast(), spare.len()) };
        if n > spare.len() {
            out.reserve(n);
            return self.encode_into(out);
        }
        // SAFETY: the shim initialized `n` bytes after the length, within the capacity.
        unsafe { out.set_len(out.len() + n) };
    }
}

impl Drop for CppMessage {
    fn drop(&mut self) {
        // SAFETY: `self.0` came from `tern_cpp_parse` and is freed once, here.
        unsafe { tern_cpp_free(self.0) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every staged message parses in C++ and encodes to the bytes prost writes for it.
    #[test]
    fn cpp_and_prost_agree_on_every_workload_message() {
        let shared = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../shared/hyperprotobench/bench0");
        let manifest: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(shared.join("manifest.json")).unwrap()).unwrap();
        let mut n = 0;
        for m in manifest["messages"].as_array().unwrap() {
            let ty = m["type"].as_str().unwrap();
            let bytes = std::fs::read(shared.join(m["file"].as_str().unwrap())).unwrap();
            let t = CppType::new("bench0", ty).expect("compiled in");
            assert!(t.decode_arena(&bytes));
            let mut ours = Vec::new();
            t.parse(&bytes).unwrap().encode_into(&mut ours);
            let mut prost = Vec::new();
            crate::encoder("bench0", ty, &bytes).unwrap()(&mut prost);
            assert_eq!(ours, prost, "{ty}");
            n += 1;
        }
        assert!(n > 0);
        assert!(CppType::new("bench0", "hyperprotobench.Nope").is_none());
        assert!(
            !CppType::new("bench0", manifest["messages"][0]["type"].as_str().unwrap()).unwrap().decode_arena(&[0x08])
        );
    }
}
