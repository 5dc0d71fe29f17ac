//! A frame through a chain (`tern_chain`): four tenants whose chains hold every task kind
//! (firewall, NAT, load balancer, KV cache; go-back-N and AES sealing; AES opening and a dummy;
//! a second firewall and NAT, with small shares per source), planned together with sharing, their task instances kept across
//! inputs. The input is cut into frames (a 2-byte big-endian length, then the bytes; the
//! length's low bit puts the frame behind headroom or not). Each is classified and run through
//! its tenant's positions, skips by the mask, as the data path runs them. Nothing may panic; a
//! frame the classifier takes that leaves (on, or answered) still parses, checksums and all.
#![no_main]

use std::cell::RefCell;
use std::time::Instant;

use libfuzzer_sys::fuzz_target;
use tern_chain::plan::{self, Plan};
use tern_chain::runtime::{Classify, Wrapper, build_chain};
use tern_chain::task::{self, Cx, Keys, Verdict};
use tern_chain::tenant::{TaskSpec, Tenant};
use tern_io::Pool;
use tern_wire::frame::FrameInfo;

const KEY: &str = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f";

struct World {
    plan: Plan,
    classify: Classify,
    chains: Vec<Vec<Wrapper>>,
    pool: Pool,
}

fn world() -> World {
    let texts = [
        "tenant = \"a\"\ndag = \"fw -> nat -> lb -> kv\"\n[ingress]\ndst = \"10.1.0.0/16\"\n[nt.fw]\nkind = \"firewall\"\nrules = [{ action = \"allow\", proto = \"udp\" }, { action = \"allow\", proto = \"tcp\", dst_port = \"80-443\" }]\n[nt.nat]\nkind = \"nat\"\nexternal = \"192.0.2.1\"\nports = \"20000-20063\"\nidle_s = 1\n[nt.lb]\nkind = \"lb\"\nbackends = [{ name = \"10.1.9.1:80\" }, { name = \"10.1.9.2:8080\", weight = 2 }]\ntable_size = 101\n[nt.kv]\nkind = \"kv\"\nmax_bytes = 4096\nmax_entries = 8\nmax_pending = 8\n".to_string(),
        format!("tenant = \"b\"\ndag = \"gbn -> aes\"\n[ingress]\ndst = \"10.2.0.0/16\"\nproto = \"udp\"\n[nt.gbn]\nkind = \"gbn\"\nmax_connections_per_peer = 2\n[nt.aes]\nkind = \"aes\"\nkey = \"{KEY}\"\n"),
        format!("tenant = \"c\"\ndag = \"open -> d\"\n[ingress]\ndst = \"10.3.0.0/16\"\n[nt.open]\nkind = \"aes\"\nkey = \"{KEY}\"\ndirection = \"open\"\n[nt.d]\nkind = \"dummy\"\n"),
        "tenant = \"e\"\ndag = \"fw -> nat\"\n[nt.fw]\nkind = \"firewall\"\ndefault = \"allow\"\nmax_flows = 4\nmax_flows_per_source = 2\n[nt.nat]\nkind = \"nat\"\nexternal = \"198.51.100.1\"\nports = \"1024-1031\"\nports_per_host = 2\n".to_string(),
    ];
    let tenants: Vec<Tenant> = texts.iter().map(|t| Tenant::parse(t).unwrap()).collect();
    let area = |t: &TaskSpec| Ok(if let TaskSpec::Dummy { luts, .. } = t { *luts } else { 1000 });
    let plan = plan::plan(&tenants, &area, 8, 100_000).unwrap();
    let mut keys = Keys::default();
    let mut factory = |t: usize, n: usize| task::build(&tenants[t].tasks[n], &mut keys);
    let chains = (0..plan.chains.len()).map(|c| build_chain(&plan, c, tenants.len(), &mut factory, (0, 1)).unwrap()).collect();
    World { classify: Classify::new(&tenants), plan, chains, pool: Pool::new(64, 2048) }
}

thread_local! {
    static WORLD: RefCell<World> = RefCell::new(world());
}

fuzz_target!(|data: &[u8]| {
    WORLD.with(|w| {
        let w = &mut *w.borrow_mut();
        let mut rest = data;
        let mut emitted = Vec::new();
        while let [hi, lo, tail @ ..] = rest {
            let n = u16::from_be_bytes([*hi, *lo]);
            let len = usize::from(n >> 1).min(tail.len()).min(2000);
            let (frame, more) = tail.split_at(len);
            rest = more;
            let mut p = w.pool.packet();
            p.reserve_headroom(if n & 1 == 1 { 64 } else { 0 });
            if p.extend_from_slice(frame).is_err() {
                w.pool.put(p);
                continue;
            }
            let Ok((t, _)) = w.classify.tenant(frame) else {
                w.pool.put(p);
                continue;
            };
            let pl = &w.plan.tenants[t];
            let mut cx = Cx { now: Instant::now(), pool: &w.pool, emitted: &mut emitted, paced: false, port: 0 };
            let mut leaves = true;
            for wr in &mut w.chains[pl.chain] {
                if pl.skip >> wr.position & 1 == 1 {
                    continue;
                }
                match wr.run_one(t, &mut p, &mut cx) {
                    Verdict::Pass => {}
                    Verdict::Reply => break,
                    Verdict::Drop(_) => {
                        leaves = false;
                        break;
                    }
                }
            }
            if leaves {
                assert!(FrameInfo::parse(p.data()).is_ok(), "a frame the classifier took left unparsable: {:02x?}", p.data());
            }
            for e in emitted.drain(..) {
                assert!(FrameInfo::parse(e.data()).is_ok());
                w.pool.put(e);
            }
            w.pool.put(p);
        }
    });
});
