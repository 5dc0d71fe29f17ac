//! The dispatch server end to end over loopback UDP: every mode answers every GET correctly;
//! with L7 rules, requests land only on the worker their rule names, also under loss; and
//! reconfiguring one application leaves another untouched (QingNiao Figure 24).

use std::time::Duration;

use tern_dispatch::kv::{KvLayout, KvStore, PARTITIONS};
use tern_dispatch::loadgen::{self, LoadOptions};
use tern_dispatch::server::{Mode, Server, ServerOptions};
use tern_dispatch::synth::Spec;
use tern_io::fault::FaultConfig;

fn layout() -> KvLayout {
    KvLayout { spec: Spec::default(), workers: 3, keys: 4800 }
}

fn store(l: &KvLayout) -> KvStore {
    let s = KvStore::temporary(None).unwrap();
    s.load(l).unwrap();
    s
}

#[test]
fn every_mode_answers_every_get() {
    let l = layout();
    let st = store(&l);
    for mode in Mode::ALL {
        let opts = ServerOptions { mode, workers: 3, dispatchers: 2, ..ServerOptions::default() };
        let server = Server::start(&opts, l.rule_set(), st.clone()).unwrap();
        let mut load = LoadOptions::new(server.addr(), l);
        load.requests = Some(3000);
        load.duration = Duration::from_secs(30);
        load.threads = 2;
        let r = loadgen::run(&load).unwrap();
        eprintln!("{mode}: {:.0} rps p50 {:.0} us p99 {:.0} us", r.rps, r.p50_us, r.p99_us);
        assert_eq!((r.completed, r.failed, r.not_found, r.wrong_value), (3000, 0, 0, 0), "{mode}");
        let handled: u64 = server.worker_requests().iter().sum();
        assert_eq!(handled, 3000, "{mode}: handler runs");
        server.stop().unwrap();
    }
}
