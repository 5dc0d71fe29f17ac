// Generates the request types of the built-in applications with the QingNiao IDL compiler,
// exactly as a user's build.rs would.
fn main() {
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    if let Err(e) = tern_idl::compile_protos(&["proto/pingpong.proto", "proto/probe.proto"], &out) {
        panic!("IDL compilation failed: {e}");
    }
}
