//! The Prometheus endpoint of `serve` commands: `/metrics` (text exposition, encoded by
//! `prometheus-client` from the engine's counters at scrape time), `/ready` and `/config`,
//! served over HTTP by `tiny_http`.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use prometheus_client::encoding::{DescriptorEncoder, EncodeGaugeValue, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
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

/// A gauge a row (integer or float values).
pub(crate) fn gauge_family<N: EncodeGaugeValue + Clone + std::fmt::Debug>(
    enc: &mut DescriptorEncoder<'_>,
    name: &str,
    help: &str,
    rows: &[(Labels, N)],
) -> Result<(), std::fmt::Error> {
    let mut m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    for (labels, v) in rows {
        ConstGauge::new(v.clone()).encode(m.encode_family(labels)?)?;
    }
    Ok(())
}

pub(crate) fn counter(enc: &mut DescriptorEncoder<'_>, name: &str, help: &str, v: u64) -> Result<(), std::fmt::Error> {
    let m = enc.encode_descriptor(name, help, None, MetricType::Counter)?;
    ConstCounter::new(v).encode(m)
}

/// One gauge without labels.
pub(crate) fn gauge(enc: &mut DescriptorEncoder<'_>, name: &str, help: &str, v: i64) -> Result<(), std::fmt::Error> {
    let m = enc.encode_descriptor(name, help, None, MetricType::Gauge)?;
    ConstGauge::new(v).encode(m)
}

pub(crate) fn label(k: &'static str, v: impl ToString) -> Labels {
    vec![(Cow::Borrowed(k), v.to_string())]
}

/// More paths for the endpoint: given a path, a JSON body (or `None`: not found).
pub type ExtraFn = dyn Fn(&str) -> Option<String> + Send + Sync;
/// See [`ExtraFn`].
pub type Extra = Box<ExtraFn>;
/// POST requests: given the URL (path and query) and the body (at most 1 MiB), the answer
/// (`Ok`: 200 with a JSON body; `Err((status, message))`), or `None`: not a POST path.
pub type PostFn = dyn Fn(&str, &[u8]) -> Option<Result<String, (u16, String)>> + Send + Sync;
/// See [`PostFn`].
pub type Post = Box<PostFn>;

/// Threads answering requests. Connections are read (and slow clients waited for) on
/// tiny_http's own per-connection threads, so these only encode and write answers.
const HANDLERS: usize = 2;

/// Serves `/metrics`, `/ready`, `/config` (and whatever `extra` answers, as JSON) over HTTP/1.1
/// on `addr` until `stop` is set; returns the bound address. `GET` and `HEAD` only (others: 405
/// with `Allow`); the query string is ignored; unknown paths are 404.
pub fn serve(
    addr: SocketAddr,
    registry: Registry,
    config: Arc<Mutex<String>>,
    stop: Arc<AtomicBool>,
    extra: Option<Extra>,
) -> std::io::Result<SocketAddr> {
    serve_with_post(addr, registry, config, stop, extra, None)
}

/// As [`serve`], and POST requests answered by `post` (control actions: `tern switch scale`).
pub fn serve_with_post(
    addr: SocketAddr,
    registry: Registry,
    config: Arc<Mutex<String>>,
    stop: Arc<AtomicBool>,
    extra: Option<Extra>,
    post: Option<Post>,
) -> std::io::Result<SocketAddr> {
    let server = tiny_http::Server::http(addr)
        .map_err(|e| std::io::Error::other(format!("cannot serve metrics on {addr}: {e}")))?;
    let bound = server
        .server_addr()
        .to_ip()
        .ok_or_else(|| std::io::Error::other(format!("metrics endpoint on {addr} has no IP address")))?;
    let shared = Arc::new((server, registry, config, extra, post));
    for i in 0..HANDLERS {
        let (shared, stop) = (shared.clone(), stop.clone());
        thread::Builder::new().name(format!("tern-metrics-{i}")).spawn(move || {
            let (server, registry, config, extra, post) = &*shared;
            while !stop.load(Ordering::Relaxed) {
                match server.recv_timeout(Duration::from_millis(100)) {
                    Ok(Some(req)) => answer(req, registry, config, extra.as_deref(), post.as_deref()),
                    Ok(None) => {}
                    Err(_) => thread::sleep(Duration::from_millis(20)),
                }
            }
        })?;
    }
    Ok(bound)
}

fn header(name: &str, value: &str) -> tiny_http::Header {
    tiny_http::Header::from_bytes(name.as_bytes(), value.as_bytes()).expect("valid header")
}

fn answer(
    mut req: tiny_http::Request,
    registry: &Registry,
    config: &Mutex<String>,
    extra: Option<&ExtraFn>,
    post: Option<&PostFn>,
) {
    use tiny_http::Method;
    if *req.method() == Method::Post
        && let Some(p) = post
    {
        let url = req.url().to_string();
        let mut data = Vec::new();
        let read = std::io::Read::read_to_end(&mut std::io::Read::take(req.as_reader(), 1 << 20), &mut data);
        let answer = match read {
            Ok(_) => p(&url, &data),
            Err(e) => Some(Err((400, format!("reading the body: {e}")))),
        };
        let (status, body) = match answer {
            Some(Ok(body)) => (200, body),
            Some(Err((status, msg))) => (status, format!("{msg}\n")),
            None => (404, "no such control path\n".into()),
        };
        let ctype = if status == 200 { "application/json" } else { "text/plain; charset=utf-8" };
        let resp =
            tiny_http::Response::from_string(body).with_status_code(status).with_header(header("Content-Type", ctype));
        let _ = req.respond(resp);
        return;
    }
    if !matches!(req.method(), Method::Get | Method::Head) {
        let allow = if post.is_some() { "GET, HEAD, POST" } else { "GET, HEAD" };
        let resp = tiny_http::Response::from_string(format!("only {allow}\n"))
            .with_status_code(405)
            .with_header(header("Allow", allow));
        let _ = req.respond(resp);
        return;
    }
    let path = req.url().split('?').next().unwrap_or("/").to_string();
    let (status, ctype, body) = match path.as_str() {
        "/metrics" => {
            let mut body = String::new();
            match prometheus_client::encoding::text::encode(&mut body, registry) {
                Ok(()) => (200, "application/openmetrics-text; version=1.0.0; charset=utf-8", body),
                Err(_) => (500, "text/plain; charset=utf-8", "encoding failed\n".into()),
            }
        }
        "/ready" => (200, "text/plain; charset=utf-8", "ready\n".into()),
        "/config" => (200, "text/plain; charset=utf-8", config.lock().map(|c| c.clone()).unwrap_or_default()),
        p => match extra.and_then(|f| f(p)) {
            Some(body) => (200, "application/json", body),
            None => (404, "text/plain; charset=utf-8", "try /metrics, /ready or /config\n".into()),
        },
    };
    // tiny_http leaves the body out of the answer to a HEAD request.
    let resp =
        tiny_http::Response::from_string(body).with_status_code(status).with_header(header("Content-Type", ctype));
    let _ = req.respond(resp);
}

/// Checks that `v`, the JSON `url` answered, holds each of `keys` at its top level, as the
/// endpoint of `server` (the command that serves it) does: a client pointed at another HTTP
/// server says so rather than print what it did not get.
pub fn answered_by(url: &str, v: &serde_json::Value, server: &str, keys: &[&str]) -> Result<(), String> {
    match keys.iter().find(|k| v.get(**k).is_none_or(serde_json::Value::is_null)) {
        Some(k) => Err(format!("{url}: not an answer of `{server}` (no `{k}`); is that its address?")),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::net::TcpStream;

    use super::*;

    fn agent() -> ureq::Agent {
        ureq::Agent::config_builder()
            .timeout_global(Some(Duration::from_secs(3)))
            .http_status_as_error(false)
            .build()
            .into()
    }

    /// Methods and paths as HTTP says; a slow client holds no scrape up; scrapes run together.
    #[test]
    fn endpoint_speaks_http_and_a_slow_client_blocks_nothing() {
        let stop = Arc::new(AtomicBool::new(false));
        let config = Arc::new(Mutex::new("rules\n".to_string()));
        let extra: Extra = Box::new(|p| (p == "/flows").then(|| "[]".to_string()));
        let addr =
            serve("127.0.0.1:0".parse().unwrap(), Registry::default(), config, stop.clone(), Some(extra)).unwrap();
        // A client that sends half a request line and waits.
        let mut slow = TcpStream::connect(addr).unwrap();
        slow.write_all(b"GET /met").unwrap();
        let base = format!("http://{addr}");
        let a = agent();
        let start = std::time::Instant::now();
        let mut r = a.get(&format!("{base}/metrics?from=test")).call().unwrap();
        assert_eq!(r.status(), 200);
        assert!(r.body_mut().read_to_string().unwrap().contains("# EOF"));
        assert!(start.elapsed() < Duration::from_secs(1), "a scrape waited {:?}", start.elapsed());
        let r = a.post(&format!("{base}/metrics")).send("x").unwrap();
        assert_eq!(r.status(), 405);
        assert_eq!(r.headers().get("allow").unwrap(), "GET, HEAD");
        assert_eq!(a.get(&format!("{base}/nothing")).call().unwrap().status(), 404);
        let mut r = a.head(&format!("{base}/ready")).call().unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.body_mut().read_to_string().unwrap(), "");
        assert_eq!(a.get(&format!("{base}/config")).call().unwrap().body_mut().read_to_string().unwrap(), "rules\n");
        assert_eq!(a.get(&format!("{base}/flows")).call().unwrap().body_mut().read_to_string().unwrap(), "[]");
        // Eight scrapes at once, the slow client still connected.
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let url = format!("{base}/metrics");
                std::thread::spawn(move || agent().get(&url).call().map(|r| r.status()).unwrap())
            })
            .collect();
        for h in handles {
            assert_eq!(h.join().unwrap(), 200);
        }
        // The slow client finishes its request and is answered too.
        slow.write_all(b"rics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
        let mut text = String::new();
        slow.read_to_string(&mut text).unwrap();
        assert!(text.starts_with("HTTP/1.1 200"), "{text}");
        stop.store(true, Ordering::Relaxed);
    }

    #[test]
    fn a_held_address_is_an_error_naming_it() {
        let held = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = held.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(true));
        let err = serve(addr, Registry::default(), Arc::default(), stop, None).unwrap_err().to_string();
        assert!(err.contains(&addr.to_string()) && err.contains("in use"), "{err}");
    }
}
