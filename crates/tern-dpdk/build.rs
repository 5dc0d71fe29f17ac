//! With the `dpdk` feature: compiles `csrc/shim.c` against the system DPDK found by pkg-config.
fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    #[cfg(feature = "dpdk")]
    dpdk();
}

#[cfg(feature = "dpdk")]
fn dpdk() {
    println!("cargo:rerun-if-changed=csrc/shim.c");
    let lib = pkg_config::Config::new()
        .atleast_version("21.11")
        .probe("libdpdk")
        .unwrap_or_else(|e| panic!("feature `dpdk` needs DPDK's headers and pkg-config file (Debian: apt-get install libdpdk-dev pkg-config): {e}"));
    // DPDK's cflags carry `-include rte_config.h` and a -march, which pkg-config's include
    // paths alone do not give: take them verbatim.
    let cflags =
        std::process::Command::new("pkg-config").args(["--cflags", "libdpdk"]).output().expect("pkg-config runs");
    let mut build = cc::Build::new();
    build.file("csrc/shim.c").opt_level(3).warnings(false);
    for p in &lib.include_paths {
        build.include(p);
    }
    let flags = String::from_utf8_lossy(&cflags.stdout).into_owned();
    let mut it = flags.split_whitespace();
    while let Some(f) = it.next() {
        if f == "-include" {
            if let Some(h) = it.next() {
                build.flag("-include").flag(h);
            }
        } else if !f.starts_with("-I") {
            build.flag(f);
        }
    }
    build.compile("tern_dpdk_shim");
}
