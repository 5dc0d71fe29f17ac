//! A task that panics (a bug: no input should make a task panic, and the fuzz targets look for
//! those) stops the whole data path rather than leaving it running short of a core: `run`
//! returns an error naming the core and the panic's message, on core 0 (the caller's thread)
//! or another, in `snic` and in `rtc`. Packets keep coming all the while; the run must end.

mod common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{area, udp};
use tern_chain::plan;
use tern_chain::runtime::{Arrival, Config, Egress, Ingress, Item, Mode, Runtime};
use tern_chain::task::{Cost, Cx, NetworkTask, Verdict};
use tern_chain::tenant::Tenant;
use tern_io::{Packet, Pool};

/// Passes packets on; the instance built `panics_as` panics at its 100th packet.
#[derive(Debug)]
struct Faulty {
    seen: u64,
    panics: bool,
}

impl NetworkTask for Faulty {
    fn kind(&self) -> &'static str {
        "stage"
    }
    fn cost(&self) -> Cost {
        Cost { ns_per_packet: 0.0, luts: None, gbps: None, stateful: false, modifies: false }
    }
    fn process(&mut self, _: &mut Packet, _: &mut Cx<'_>) -> Verdict {
        self.seen += 1;
        assert!(!(self.panics && self.seen == 100), "faulty task at its 100th packet");
        Verdict::Pass
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
}

/// Packets of many flows, for ever.
struct Endless {
    pool: Pool,
    n: u32,
}

impl Ingress for Endless {
    fn recv(&mut self, now: Instant, max: usize, out: &mut Vec<Arrival>) {
        for _ in 0..max {
            self.n = self.n.wrapping_add(1);
            let packet = udp(&self.pool, [10, 1, 0, 1], [10, 0, 1, 1], 1000 + (self.n % 512) as u16, 53, b"x");
            out.push(Arrival { packet, at: now, port: 0 });
        }
    }
}

struct Sink(Pool);

impl Egress for Sink {
    fn send(&mut self, _: Instant, items: &mut Vec<Item>) {
        for item in items.drain(..) {
            self.0.put(item.packet);
        }
    }
}

/// Runs one tenant's chain of one task on two cores with two instances, the `faulty`-th task
/// instance built (from 0) panicking; the run's result, waited for at most a minute.
fn run(mode: Mode, faulty: usize) -> Result<(), String> {
    let pool = Pool::new(8192, 256);
    let tenants = vec![
        Tenant::parse("tenant = \"a\"\ndag = \"t\"\n[ingress]\ndst = \"10.0.1.0/24\"\n[nt.t]\nkind = \"dummy\"\n")
            .unwrap(),
    ];
    let p = plan::plan(&tenants, &area, 8, 100_000).unwrap();
    let cfg = Config { mode, cores: 2, instances: 2, ..Config::default() };
    let built = AtomicUsize::new(0);
    let mut factory = |_: usize, _: usize| -> Result<Box<dyn NetworkTask>, String> {
        let k = built.fetch_add(1, Ordering::Relaxed);
        Ok(Box::new(Faulty { seen: 0, panics: k == faulty }))
    };
    let rt = Runtime::new(p, tenants, cfg, &mut factory).unwrap();
    let ingress: Vec<Box<dyn Ingress>> = (0..2).map(|_| Box::new(Endless { pool: pool.clone(), n: 0 }) as _).collect();
    let egress: Vec<Box<dyn Egress>> = (0..2).map(|_| Box::new(Sink(pool.clone())) as _).collect();
    let (tx, rx) = std::sync::mpsc::channel();
    let pool2 = pool.clone();
    std::thread::spawn(move || {
        let _ = tx.send(rt.run(&pool2, ingress, egress).map(|_| ()));
    });
    rx.recv_timeout(Duration::from_secs(60)).expect("the run ended after a task panicked")
}

#[test]
fn a_task_panicking_on_any_core_stops_the_data_path_with_an_error_naming_it() {
    // The panics print their messages (the default hook); the runs still end.
    let cores = Arc::new(std::sync::Mutex::new(Vec::new()));
    for mode in [Mode::Snic, Mode::Rtc] {
        for faulty in 0..2 {
            let e = run(mode, faulty).expect_err("a panic is an error");
            assert!(e.starts_with("the data path stopped: core "), "{e}");
            assert!(e.contains(" panicked ("), "{e}");
            assert!(e.contains("(faulty task at its 100th packet)"), "{e}");
            cores.lock().unwrap().push((mode.name(), faulty, e));
        }
    }
    // Each instance of the two is on a core of its own: both cores were seen to fail.
    for mode in ["snic", "rtc"] {
        let seen: std::collections::BTreeSet<bool> =
            cores.lock().unwrap().iter().filter(|(m, ..)| *m == mode).map(|(_, _, e)| e.contains("core 0")).collect();
        assert_eq!(seen.len(), 2, "{mode}: {:?}", cores.lock().unwrap());
    }
}
