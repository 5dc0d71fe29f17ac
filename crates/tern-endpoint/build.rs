// Generates the call and reply frames with the QingNiao IDL compiler.
fn main() {
    let out = std::env::var("OUT_DIR").expect("cargo sets OUT_DIR");
    if let Err(e) = tern_idl::compile_protos(&["proto/endpoint.proto"], &out) {
        panic!("IDL compilation failed: {e}");
    }
}
