//! The Prometheus endpoint of `serve` commands: `/metrics` (text exposition, encoded by
//! `prometheus-client` from the engine's counters at scrape time), `/ready` and `/config`.

use std::borrow::Cow;
use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::registry::Registry;

pub(crate) type Labels = Vec<(Cow<'static, str>, String)>;

pub(crate) fn counter_family(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    rows: &[(Labels, u64)],
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    for (labels, v) in rows {
        ConstCounter::new(*v).encode(m.encode_family(labels)?)?;
    }
    Ok(())
}

pub(crate) fn counter(enc: &mut DescriptorEncoder<'_>, name: &str, help: &str, v: u64) -> Result<(), std::fmt::Error> {
    let m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    ConstCounter::new(v).encode(m)
}

pub(crate) fn label(k: &'static str, v: impl ToString) -> Labels {
    vec![(Cow::Borrowed(k), v.to_string())]
}

/// More paths for the endpoint: given a path, a JSON body (or `None`: not found).
pub type ExtraFn = dyn Fn(&str) -> Option<String> + Send;
/// See [`ExtraFn`].
pub type Extra = Box<ExtraFn>;

/// Serves `/metrics`, `/ready`, `/config` (and whatever `extra` answers, as JSON) on `addr`
/// until `stop` is set; returns the bound address.
pub fn serve(
    addr: SocketAddr,
    registry: Registry,
    config: Arc<Mutex<String>>,
    stop: Arc<AtomicBool>,
    extra: Option<Extra>,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)?;
    let bound = listener.local_addr()?;
    listener.set_nonblocking(true)?;
    thread::Builder::new().name("tern-metrics".into()).spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((s, _)) => {
                    let _ = answer(s, &registry, &config, extra.as_deref());
                }
                Err(_) => thread::sleep(Duration::from_millis(20)),
            }
        }
    })?;
    Ok(bound)
}

fn answer(
    mut s: TcpStream,
    registry: &Registry,
    config: &Mutex<String>,
    extra: Option<&ExtraFn>,
) -> std::io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(Duration::from_secs(2)))?;
    let mut line = String::new();
    BufReader::new(&s).read_line(&mut line)?;
    let path = line.split_whitespace().nth(1).unwrap_or("/");
    let (status, ctype, body) = match path {
        "/metrics" => {
            let mut body = String::new();
            match prometheus_client::encoding::text::encode(&mut body, registry) {
                Ok(()) => ("200 OK", "application/openmetrics-text; version=1.0.0; charset=utf-8", body),
                Err(_) => ("500 Internal Server Error", "text/plain", "encoding failed\n".into()),
            }
        }
        "/ready" => ("200 OK", "text/plain", "ready\n".into()),
        "/config" => ("200 OK", "text/plain", config.lock().map(|c| c.clone()).unwrap_or_default()),
        p => match extra.and_then(|f| f(p)) {
            Some(body) => ("200 OK", "application/json", body),
            None => ("404 Not Found", "text/plain", "try /metrics, /ready or /config\n".into()),
        },
    };
    write!(
        s,
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}
