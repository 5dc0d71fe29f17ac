fn main() {
    let rounds: usize = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(3000);
    let mut rig = tern_chain::bench::SchedRig::new();
    println!("{:.1}", rig.ns_per_decision(rounds));
}
