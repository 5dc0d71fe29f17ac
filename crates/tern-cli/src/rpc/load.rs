//! `tern rpc load CONFIG`: a closed-loop client of `tern rpc serve`: the configuration's sample
//! messages called in turn, `--concurrency` outstanding, until `--requests` are answered; calls
//! per second, latency percentiles (HDR histogram) and answers by status.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::Args;
use hdrhistogram::Histogram;
use tern_endpoint::{Header, RpcClient, Status};
use tern_io::udp::{UdpConfig, UdpPort};
use tern_rpc::service::Service;

use crate::CmdResult;

#[derive(Debug, Args)]
pub struct LoadArgs {
    /// The service configuration: its `[[messages]]` are the calls made.
    pub config: PathBuf,
    /// The server's UDP address.
    #[arg(long, default_value = "127.0.0.1:7400")]
    pub server: SocketAddr,
    /// Calls to complete.
    #[arg(long, default_value_t = 1000)]
    pub requests: u64,
    /// Calls outstanding at once.
    #[arg(long, default_value_t = 8)]
    pub concurrency: usize,
    /// Give up after this many seconds (more than 0, at most a year).
    #[arg(long, default_value_t = 60.0, value_parser = crate::signals::duration_secs)]
    pub timeout: f64,
    /// IP MTU that requests are segmented by (576 to 65535) [default: the path MTU to the
    /// server as the kernel knows it, at most 65535 (loopback's)].
    #[arg(long)]
    pub mtu: Option<usize>,
    /// Print JSON (no progress bar).
    #[arg(long)]
    pub json: bool,
}

/// `tern rpc load`: exit 0 when every call was answered (whatever its status), 1 if any failed.
pub fn run(a: &LoadArgs) -> CmdResult {
    let svc = Service::load(&a.config)?;
    if svc.samples.is_empty() {
        return Err(format!("{}: no [[messages]] to call with", svc.file.display()).into());
    }
    if a.requests == 0 || a.concurrency == 0 {
        return Err("--requests and --concurrency must be at least 1".into());
    }
    // Samples that are some method's request; the rest are for `tern hw report` only.
    let calls: Vec<(u32, u32, &[u8])> = svc
        .samples
        .iter()
        .filter(|s| s.method != 0)
        .filter_map(|s| svc.table.class_by_name(&s.ty).map(|c| (s.method, c.id, s.bytes.as_slice())))
        .collect();
    if calls.is_empty() {
        return Err(format!("{}: no [[messages]] is a request of one of the app's methods", svc.file.display()).into());
    }
    let (qnp, pool) = super::serve::transport(a.server, a.mtu)?;
    let local = SocketAddr::new(if a.server.is_ipv4() { [127, 0, 0, 1].into() } else { [0u16; 8].into() }, 0);
    let port = UdpPort::bind(local, &pool, &UdpConfig::default())?;
    let mut client = RpcClient::new(port, &pool, qnp, a.server);
    let mut hist = Histogram::<u64>::new_with_bounds(1, 60_000_000_000, 3)?;
    // Every status from the start, at 0 (`other`, for codes the table does not list, once met).
    let mut by_status: std::collections::BTreeMap<&str, u64> = Status::ALL.iter().map(|s| (s.name(), 0)).collect();
    let (mut sent, mut done, mut failed) = (0u64, 0u64, 0u64);
    let mut got = Vec::new();
    let bar = crate::progress::bar(a.requests, "calls", a.json);
    let start = Instant::now();
    let deadline = start + Duration::from_secs_f64(a.timeout);
    while done + failed < a.requests {
        if Instant::now() > deadline {
            return Err(format!(
                "{} of {} calls unanswered after {} s",
                a.requests - done - failed,
                a.requests,
                a.timeout
            )
            .into());
        }
        while sent < a.requests && client.outstanding() < a.concurrency {
            let (method, class_id, body) = calls[(sent % calls.len() as u64) as usize];
            client.call(Header { method, class_id, request_id: sent, flags: 0 }, body)?;
            sent += 1;
        }
        client.flush()?;
        got.clear();
        client.recv(&mut got, Duration::from_millis(10))?;
        for r in got.drain(..) {
            match r {
                Ok(ans) => {
                    done += 1;
                    *by_status.entry(ans.status.name()).or_default() += 1;
                    let _ = hist.record(ans.latency.as_nanos().max(1) as u64);
                }
                Err(_) => failed += 1,
            }
            bar.inc(1);
        }
    }
    bar.finish_and_clear();
    let secs = start.elapsed().as_secs_f64();
    let q = |p: f64| hist.value_at_quantile(p) as f64 / 1000.0;
    if a.json {
        let v = serde_json::json!({
            "server": a.server.to_string(), "requests": a.requests, "concurrency": a.concurrency,
            "answered": done, "failed": failed, "seconds": secs, "calls_per_s": done as f64 / secs,
            "latency_us": {"p50": q(0.5), "p99": q(0.99), "max": hist.max() as f64 / 1000.0},
            "statuses": by_status,
        });
        println!("{}", serde_json::to_string_pretty(&v)?);
    } else {
        println!(
            "{done} calls answered ({failed} failed) in {secs:.2} s: {:.0} calls/s; latency p50 {:.0} us, p99 {:.0} us",
            done as f64 / secs,
            q(0.5),
            q(0.99)
        );
        for (s, n) in by_status.iter().filter(|(_, n)| **n > 0) {
            println!("  {s}: {n}");
        }
    }
    Ok(if failed == 0 { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}
