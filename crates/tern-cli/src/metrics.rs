//! The Prometheus endpoint of `serve` commands: `/metrics` (text exposition, encoded by
//! `prometheus-client` from the engine's counters at scrape time), `/ready` and `/config`,
//! served over HTTP by [`tern_io::http`].

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use tern_io::http::Reply;

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

/// Serves `/metrics`, `/ready`, `/config` (and whatever `extra` answers, as JSON) over HTTP/1.1
/// on `addr` until `stop` is set; returns the bound address. `GET` and `HEAD` only (others: 405
/// with `Allow`); the query string is ignored; unknown paths are 404. The HTTP side, and what it
/// refuses, is [`tern_io::http`]'s.
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
    let refusals = Arc::new(tern_io::http::Refusals::default());
    let mut registry = registry;
    registry.register_collector(Box::new(HttpCollector(refusals.clone())));
    let handler: Arc<tern_io::http::Handler> = Arc::new(move |method: &str, target: &str, body: &[u8]| {
        answer(method, target, body, &registry, &config, extra.as_deref(), post.as_deref())
    });
    tern_io::http::serve(addr, stop, handler, refusals)
}

/// Every endpoint's own family: what its HTTP server refused, by reason (every reason, from 0).
#[derive(Debug)]
struct HttpCollector(Arc<tern_io::http::Refusals>);

impl prometheus_client::collector::Collector for HttpCollector {
    fn encode(&self, mut enc: DescriptorEncoder<'_>) -> Result<(), std::fmt::Error> {
        let rows: Vec<_> = self.0.counts().into_iter().map(|(r, n)| (label("reason", r), n)).collect();
        counter_family(
            &mut enc,
            "tern_http_refused",
            "Requests this endpoint refused, and connections it closed before an answer, by reason.",
            &rows,
        )
    }
}

fn answer(
    method: &str,
    target: &str,
    body: &[u8],
    registry: &Registry,
    config: &Mutex<String>,
    extra: Option<&ExtraFn>,
    post: Option<&PostFn>,
) -> Reply {
    if method == "POST"
        && let Some(p) = post
    {
        return match p(target, body) {
            Some(Ok(body)) => Reply { status: 200, content_type: "application/json", body, allow: None },
            Some(Err((status, msg))) => Reply::text(status, format!("{msg}\n")),
            None => Reply::text(404, "no such control path\n"),
        };
    }
    if method != "GET" && method != "HEAD" {
        let allow = if post.is_some() { "GET, HEAD, POST" } else { "GET, HEAD" };
        return Reply { allow: Some(allow), ..Reply::text(405, format!("only {allow}\n")) };
    }
    let path = target.split('?').next().unwrap_or("/");
    match path {
        "/metrics" => {
            let mut body = String::new();
            match prometheus_client::encoding::text::encode(&mut body, registry) {
                Ok(()) => Reply {
                    status: 200,
                    content_type: "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    body,
                    allow: None,
                },
                Err(_) => Reply::text(500, "encoding failed\n"),
            }
        }
        "/ready" => Reply::text(200, "ready\n"),
        "/config" => Reply::text(200, config.lock().map(|c| c.clone()).unwrap_or_default()),
        p => match extra.and_then(|f| f(p)) {
            Some(body) => Reply { status: 200, content_type: "application/json", body, allow: None },
            None => Reply::text(404, "try /metrics, /ready or /config\n"),
        },
    }
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
    use std::sync::atomic::Ordering;
    use std::time::Duration;

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

    /// Every endpoint serves what its HTTP server refused, every reason from 0, each reason in
    /// docs/dispatch.md's table of them.
    #[test]
    fn refusals_are_counted_by_reason_as_the_docs_name_them() {
        let stop = Arc::new(AtomicBool::new(false));
        let addr =
            serve("127.0.0.1:0".parse().unwrap(), Registry::default(), Arc::default(), stop.clone(), None).unwrap();
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(b"POST /metrics HTTP/1.1\r\nContent-Length: 2000000\r\n\r\n").unwrap();
        let mut text = String::new();
        c.read_to_string(&mut text).unwrap();
        assert!(text.starts_with("HTTP/1.1 413"), "{text}");
        let body = agent().get(&format!("http://{addr}/metrics")).call().unwrap().body_mut().read_to_string().unwrap();
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/dispatch.md")).unwrap();
        assert!(doc.contains("`tern_http_refused_total{reason}`"), "docs/dispatch.md names the family");
        for (reason, status) in tern_io::http::REFUSALS {
            let n = if reason == "body_too_large" { 1 } else { 0 };
            assert!(
                body.contains(&format!("tern_http_refused_total{{reason=\"{reason}\"}} {n}\n")),
                "{reason}: {body}"
            );
            let says = status.map_or("connection closed".to_string(), |s| format!("`{s}`"));
            assert!(
                doc.lines().any(|l| l.contains(&format!("`{reason}`")) && l.contains(&says)),
                "docs/dispatch.md: no row for `{reason}` ({says})"
            );
        }
        stop.store(true, Ordering::Relaxed);
    }
}
