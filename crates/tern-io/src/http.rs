//! The HTTP/1.1 server under every `--metrics`/`--control` endpoint of `tern`: requests parsed by
//! `httparse`, each connection on a thread of its own, every length a client sends bounded
//! before anything is allocated for it, and every wait bounded in time.
//!
//! Why not a server crate: `tiny_http` 0.12 (the latest) drains an unread body into a buffer
//! of the size the client declared, so one request declaring `Content-Length:
//! 999999999999999` ended the process (an allocation failure), and it reads bodies on the
//! answering threads without a time limit, so two clients trickling a body stopped every
//! answer, heartbeats included. The framing here is what the endpoints need and no more
//! (docs/dispatch.md, "Metrics", lists it): `Content-Length` bodies of at most
//! [`MAX_BODY_BYTES`] (413 above it, before reading), chunked bodies of at most as many bytes
//! ([`Chunked`]; other transfer codings 501), a request's head
//! of at most [`MAX_HEAD_BYTES`] (431), a request complete within [`REQUEST_DEADLINE`] of its
//! first byte (else the connection is closed), a kept-alive connection closed after [`IDLE`]
//! without a request, and at most [`MAX_CONNECTIONS`] connections at once (a new one past them
//! takes the slot of one from the address holding the most, as [`serve`] says, or is answered
//! 503), and [`MAX_CONNECTIONS_PER_PEER`] from one address (503 past them).

use std::collections::HashMap;
use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

/// The most bytes a request's body may have (1 MiB).
pub const MAX_BODY_BYTES: usize = 1 << 20;
/// The most bytes a request line and its headers may have (16 KiB).
pub const MAX_HEAD_BYTES: usize = 16 << 10;
/// The most headers a request may have (and the most trailer fields after a chunked body).
pub const MAX_HEADERS: usize = 64;
/// The most bytes a chunk-size line of a chunked body may have (its size and extensions).
pub const MAX_CHUNK_LINE: usize = 1024;
/// From a request's first byte to its last.
pub const REQUEST_DEADLINE: Duration = Duration::from_secs(10);
/// How long a kept-alive connection waits for its next request.
pub const IDLE: Duration = Duration::from_secs(60);
/// Connections served at once.
pub const MAX_CONNECTIONS: usize = 256;
/// Connections served at once from one address (an IPv6 address's /64: [`peer_of`]): one client
/// cannot take every slot.
pub const MAX_CONNECTIONS_PER_PEER: usize = 64;
/// How long writing an answer may wait for the client to read.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often a waiting connection looks at the stop flag.
const POLL: Duration = Duration::from_millis(100);
/// How often the listener looks for a new connection (and at the stop flag): a new connection
/// waits at most this long to be taken (kept-alive ones, as heartbeats' and scrapers', not at all).
const ACCEPT_POLL: Duration = Duration::from_millis(10);

/// An answer: status, content type, body, and the `Allow` header of a 405.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    /// The status code.
    pub status: u16,
    /// The `Content-Type`.
    pub content_type: &'static str,
    /// The body (left out of the answer to a `HEAD`).
    pub body: String,
    /// The methods a 405 says are allowed.
    pub allow: Option<&'static str>,
}

impl Reply {
    /// A plain-text answer.
    pub fn text(status: u16, body: impl Into<String>) -> Reply {
        Reply { status, content_type: "text/plain; charset=utf-8", body: body.into(), allow: None }
    }
}

/// What answers a request: its method, its target (path and query, as sent) and its body.
pub type Handler = dyn Fn(&str, &str, &[u8]) -> Reply + Send + Sync;

/// Why the endpoint refused a request or closed a connection before answering it: the names
/// `tern_http_refused_total{reason}` counts them by, with the status each answers (none for a
/// request not whole within [`REQUEST_DEADLINE`], or a connection closed to make room for a new
/// one, as [`serve`] says: the connection is closed).
pub const REFUSALS: [(&str, Option<u16>); 8] = [
    ("malformed", Some(400)),
    ("body_too_large", Some(413)),
    ("expectation", Some(417)),
    ("head_too_large", Some(431)),
    ("transfer_coding", Some(501)),
    ("busy", Some(503)),
    ("deadline", None),
    ("evicted", None),
];

/// Requests refused and connections closed before an answer, by reason ([`REFUSALS`]).
#[derive(Debug, Default)]
pub struct Refusals([AtomicU64; REFUSALS.len()]);

impl Refusals {
    /// Each reason of [`REFUSALS`] with its count so far.
    pub fn counts(&self) -> Vec<(&'static str, u64)> {
        REFUSALS.iter().zip(&self.0).map(|((r, _), n)| (*r, n.load(Ordering::Relaxed))).collect()
    }

    fn count(&self, reason: &str) {
        if let Some(i) = REFUSALS.iter().position(|(r, _)| *r == reason) {
            self.0[i].fetch_add(1, Ordering::Relaxed);
        }
    }

    fn count_status(&self, status: u16) {
        if let Some(i) = REFUSALS.iter().position(|(_, s)| *s == Some(status)) {
            self.0[i].fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Serves `handler` on `addr` until `stop` is set, counting what it refuses in `refusals`;
/// returns the bound address (an address another process holds is an error naming it).
///
/// With all [`MAX_CONNECTIONS`] slots taken, a new connection takes the slot of one from the
/// address holding the most connections, where that address holds more than the newcomer's
/// does: the one of them idle longest (a new connection that sent nothing yet, or a kept-alive
/// one between requests), else the one whose request began longest ago. A connection whose
/// request is in the handler, or whose answer is being written, keeps its slot. The closed
/// connection gets no answer, and is counted as `evicted`. So addresses holding many
/// connections, idle or trickling requests, displace each other, and a client that holds few
/// (a scraper, a heartbeat) keeps them and is served; with none to close, a 503.
pub fn serve(
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    handler: Arc<Handler>,
    refusals: Arc<Refusals>,
) -> std::io::Result<SocketAddr> {
    let listener = TcpListener::bind(addr)
        .map_err(|e| std::io::Error::new(e.kind(), format!("cannot serve HTTP (metrics, control) on {addr}: {e}")))?;
    let bound = listener.local_addr()?;
    listener.set_nonblocking(true)?;
    let slots = Arc::new(Slots::default());
    thread::Builder::new().name("tern-http-accept".into()).spawn(move || {
        while !stop.load(Ordering::Relaxed) {
            match listener.accept() {
                Ok((s, peer)) => {
                    // The slot is given back however the thread ends (a handler's panic too),
                    // or at once if the thread does not start.
                    let slot = match Slots::take(&slots, &s, peer_of(peer.ip()), &refusals) {
                        Ok(slot) => slot,
                        Err(why) => {
                            refusals.count("busy");
                            refuse_busy(s, why);
                            continue;
                        }
                    };
                    let (stop, handler, refusals) = (stop.clone(), handler.clone(), refusals.clone());
                    let _ = thread::Builder::new().name("tern-http".into()).spawn(move || {
                        let _ = connection(s, &slot, &stop, &*handler, &refusals);
                    });
                }
                Err(e) if e.kind() == ErrorKind::WouldBlock => thread::sleep(ACCEPT_POLL),
                Err(_) => thread::sleep(Duration::from_millis(20)),
            }
        }
    })?;
    Ok(bound)
}

/// The peer a connection is counted against: its IPv4 address (an IPv4-mapped IPv6 one as the
/// IPv4 address), or its IPv6 address's /64, the block one host or site is usually given.
pub fn peer_of(ip: IpAddr) -> IpAddr {
    match crate::unmapped(ip) {
        IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
        v4 => v4,
    }
}

/// Where a connection is: what decides whether it may be closed to make room for a new one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for a request's first byte (a new connection, or a kept-alive one between
    /// requests).
    Idle,
    /// A request begun and not yet whole.
    Reading,
    /// Its request in the handler, or its answer being written: never closed to make room.
    Answering,
}

/// A connection being served: a handle on its socket (to close it), where it is and since when.
#[derive(Debug)]
struct Conn {
    socket: TcpStream,
    peer: IpAddr,
    phase: Phase,
    since: Instant,
}

/// The connections being served: each, and how many come from each address.
#[derive(Debug, Default)]
struct Slots(Mutex<SlotsInner>);

#[derive(Debug, Default)]
struct SlotsInner {
    conns: HashMap<u64, Conn>,
    by_peer: HashMap<IpAddr, usize>,
    next: u64,
}

impl SlotsInner {
    fn release(&mut self, id: u64) {
        if let Some(c) = self.conns.remove(&id)
            && let Some(n) = self.by_peer.get_mut(&c.peer)
        {
            *n -= 1;
            if *n == 0 {
                self.by_peer.remove(&c.peer);
            }
        }
    }

    /// With every slot taken, for a new connection from `ip`: closes a connection of the address
    /// holding the most, provided it holds more than `ip` does (after the swap no address holds
    /// more than it did, and `ip` no more than the other): its connection idle longest, else its
    /// request begun longest ago; a connection answering is never closed. Frees the slot at once
    /// (the closed connection's thread sees the close and ends). Whether one was closed.
    fn evict(&mut self, ip: IpAddr) -> bool {
        let holds = |peer: &IpAddr| self.by_peer.get(peer).copied().unwrap_or(0);
        let newcomer = holds(&ip);
        let victim = self
            .conns
            .iter()
            .filter(|(_, c)| c.phase != Phase::Answering && holds(&c.peer) > newcomer)
            .min_by_key(|(_, c)| (std::cmp::Reverse(holds(&c.peer)), c.phase != Phase::Idle, c.since))
            .map(|(id, _)| *id);
        let Some(id) = victim else { return false };
        if let Some(c) = self.conns.get(&id) {
            let _ = c.socket.shutdown(std::net::Shutdown::Both);
        }
        self.release(id);
        true
    }
}

impl Slots {
    fn lock(&self) -> std::sync::MutexGuard<'_, SlotsInner> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A slot for connection `s` from `ip`, or why there is none. Where every slot is taken, a
    /// connection of the address holding the most is closed to make room ([`SlotsInner::evict`];
    /// counted in `refusals` as `evicted`).
    fn take(slots: &Arc<Slots>, s: &TcpStream, ip: IpAddr, refusals: &Refusals) -> Result<Slot, &'static str> {
        let mut inner = slots.lock();
        if inner.by_peer.get(&ip).is_some_and(|&n| n >= MAX_CONNECTIONS_PER_PEER) {
            return Err("too many connections from this address\n");
        }
        // The handle to close it by, taken only for a connection that may be served (before a
        // connection is closed to make room for it).
        let socket = s.try_clone().map_err(|_| "cannot serve this connection\n")?;
        if inner.conns.len() >= MAX_CONNECTIONS {
            if !inner.evict(ip) {
                return Err("too many connections\n");
            }
            refusals.count("evicted");
        }
        let id = inner.next;
        inner.next += 1;
        inner.conns.insert(id, Conn { socket, peer: ip, phase: Phase::Idle, since: Instant::now() });
        *inner.by_peer.entry(ip).or_insert(0) += 1;
        Ok(Slot(slots.clone(), id))
    }
}

/// A connection's place among [`MAX_CONNECTIONS`] and its address's
/// [`MAX_CONNECTIONS_PER_PEER`]; given back when dropped (or when the connection is closed to
/// make room).
struct Slot(Arc<Slots>, u64);

impl Slot {
    /// The connection is now at `phase`; false if it was closed to make room. (Both under one
    /// lock: a connection is either closed before its request enters the handler, and the
    /// request is not run, or it is answering and not closed.)
    #[must_use]
    fn enter(&self, phase: Phase) -> bool {
        match self.0.lock().conns.get_mut(&self.1) {
            Some(c) => {
                c.phase = phase;
                c.since = Instant::now();
                true
            }
            None => false,
        }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.lock().release(self.1);
    }
}

/// Past [`MAX_CONNECTIONS`] or [`MAX_CONNECTIONS_PER_PEER`]: a 503, written without waiting,
/// and the connection closed.
fn refuse_busy(mut s: TcpStream, body: &str) {
    let _ = s.set_nonblocking(true);
    let _ = write_reply(&mut s, &Reply::text(503, body), false, true);
}

/// The reason phrase of `status`, as the `http` crate names it.
fn reason(status: u16) -> &'static str {
    http::StatusCode::from_u16(status).ok().and_then(|s| s.canonical_reason()).unwrap_or("Status")
}

fn head(status: u16, content_type: &str, len: usize, allow: Option<&str>, close: bool) -> String {
    let mut h =
        format!("HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {len}\r\n", reason(status));
    if let Some(a) = allow {
        h += &format!("Allow: {a}\r\n");
    }
    if close {
        h += "Connection: close\r\n";
    }
    h + "\r\n"
}

fn write_reply(s: &mut TcpStream, r: &Reply, head_only: bool, close: bool) -> std::io::Result<()> {
    let mut out = head(r.status, r.content_type, r.body.len(), r.allow, close).into_bytes();
    if !head_only {
        out.extend_from_slice(r.body.as_bytes());
    }
    s.write_all(&out)?;
    s.flush()
}

/// A request's head, as the connection needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Head {
    /// Its bytes (request line, headers and the blank line).
    pub len: usize,
    /// The method.
    pub method: String,
    /// The target: path and query, as sent.
    pub target: String,
    /// Its body's bytes (`Content-Length`; 0 without one), at most [`MAX_BODY_BYTES`].
    pub body: usize,
    /// Whether its body comes chunked (`Transfer-Encoding: chunked`; `body` is then 0): read it
    /// with [`Chunked`].
    pub chunked: bool,
    /// Whether the connection stays open after the answer.
    pub keep_alive: bool,
    /// Whether the client waits for `100 Continue` before it sends the body.
    pub expect_continue: bool,
}

/// Parses the head at the start of `buf` (untrusted bytes: never panics): `Ok(None)` while it
/// is incomplete, `Err` with the answer that refuses it (the connection is then closed).
pub fn parse_head(buf: &[u8]) -> Result<Option<Head>, Reply> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let len = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD_BYTES => {
            return Err(Reply::text(431, format!("a request's head is at most {MAX_HEAD_BYTES} bytes\n")));
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(Reply::text(431, format!("a request has at most {MAX_HEADERS} headers\n")));
        }
        Err(e) => return Err(Reply::text(400, format!("not an HTTP/1.x request: {e}\n"))),
    };
    if len > MAX_HEAD_BYTES {
        return Err(Reply::text(431, format!("a request's head is at most {MAX_HEAD_BYTES} bytes\n")));
    }
    let (method, target, minor) = (req.method.unwrap_or(""), req.path.unwrap_or("/"), req.version.unwrap_or(1));
    let mut body: Option<u64> = None;
    let (mut close, mut keep, mut expect_continue) = (false, false, false);
    // The transfer codings, in the order applied (every `Transfer-Encoding` header's list).
    let mut codings: Vec<&str> = Vec::new();
    for h in req.headers.iter() {
        let value = std::str::from_utf8(h.value).unwrap_or("").trim();
        if h.name.eq_ignore_ascii_case("content-length") {
            let n: u64 = value
                .parse()
                .map_err(|_| Reply::text(400, format!("Content-Length `{value}` is not a number of bytes\n")))?;
            if body.is_some_and(|b| b != n) {
                return Err(Reply::text(400, "two Content-Length headers that differ\n"));
            }
            body = Some(n);
        } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
            codings.extend(value.split(',').map(str::trim).filter(|c| !c.is_empty()));
        } else if h.name.eq_ignore_ascii_case("connection") {
            for token in value.split(',').map(str::trim) {
                close |= token.eq_ignore_ascii_case("close");
                keep |= token.eq_ignore_ascii_case("keep-alive");
            }
        } else if h.name.eq_ignore_ascii_case("expect") {
            if !value.eq_ignore_ascii_case("100-continue") {
                return Err(Reply::text(417, format!("Expect `{value}` is not supported\n")));
            }
            expect_continue = true;
        }
    }
    let chunked = !codings.is_empty();
    if chunked {
        if let Some(other) = codings.iter().find(|c| !c.eq_ignore_ascii_case("chunked")) {
            return Err(Reply::text(
                501,
                format!("transfer coding `{other}` is not supported: send the body as it is, chunked or not\n"),
            ));
        }
        if codings.len() > 1 {
            return Err(Reply::text(400, "a body chunked more than once\n"));
        }
        if body.is_some() {
            return Err(Reply::text(400, "both Content-Length and Transfer-Encoding\n"));
        }
        if minor == 0 {
            return Err(Reply::text(400, "Transfer-Encoding in an HTTP/1.0 request\n"));
        }
    }
    let body = body.unwrap_or(0);
    if body > MAX_BODY_BYTES as u64 {
        return Err(Reply::text(413, format!("a request's body is at most {MAX_BODY_BYTES} bytes, not {body}\n")));
    }
    Ok(Some(Head {
        len,
        method: method.to_string(),
        target: target.to_string(),
        body: body as usize,
        chunked,
        keep_alive: if minor >= 1 { !close } else { keep },
        expect_continue,
    }))
}

/// A chunked body being decoded (sans-IO; untrusted bytes: never panics): each chunk's size line
/// (hexadecimal, extensions ignored, at most [`MAX_CHUNK_LINE`] bytes), its data and CRLF, then
/// a last chunk of size 0 and the trailer fields (parsed, at most [`MAX_HEADERS`] and
/// [`MAX_HEAD_BYTES`], and dropped). The chunks' data together is at most [`MAX_BODY_BYTES`]:
/// a size that would pass it is refused (413) before its data is read.
#[derive(Debug, Default)]
pub struct Chunked {
    at: ChunkAt,
    body: Vec<u8>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum ChunkAt {
    /// A chunk's size line.
    #[default]
    Size,
    /// This many bytes of a chunk's data still to come.
    Data(usize),
    /// The CRLF after a chunk's data.
    DataEnd,
    /// The trailer fields after the last chunk.
    Trailers,
    /// The body is whole.
    Done,
}

impl Chunked {
    /// Decodes what it can from the front of `buf` and removes it from there: `Ok(true)` once
    /// the body is whole (the bytes after it, a pipelined request's, are left in `buf`),
    /// `Ok(false)` while it needs more bytes, `Err` with the answer that refuses it.
    pub fn take(&mut self, buf: &mut Vec<u8>) -> Result<bool, Reply> {
        let mut pos = 0;
        let done = self.step(buf, &mut pos);
        buf.drain(..pos);
        done
    }

    fn step(&mut self, buf: &[u8], pos: &mut usize) -> Result<bool, Reply> {
        loop {
            let rest = &buf[*pos..];
            match self.at {
                ChunkAt::Size => {
                    if rest.is_empty() {
                        return Ok(false);
                    }
                    if !rest[0].is_ascii_hexdigit() {
                        return Err(Reply::text(400, "a chunk's size is not hexadecimal\n"));
                    }
                    let (n, size) = match httparse::parse_chunk_size(rest) {
                        Ok(httparse::Status::Complete(c)) => c,
                        Ok(httparse::Status::Partial) if rest.len() > MAX_CHUNK_LINE => {
                            return Err(Reply::text(
                                400,
                                format!("a chunk-size line is at most {MAX_CHUNK_LINE} bytes\n"),
                            ));
                        }
                        Ok(httparse::Status::Partial) => return Ok(false),
                        Err(_) => return Err(Reply::text(400, "a chunk's size line is malformed\n")),
                    };
                    if n > MAX_CHUNK_LINE {
                        return Err(Reply::text(400, format!("a chunk-size line is at most {MAX_CHUNK_LINE} bytes\n")));
                    }
                    let room = (MAX_BODY_BYTES - self.body.len()) as u64;
                    if size > room {
                        return Err(Reply::text(
                            413,
                            format!("a request's body is at most {MAX_BODY_BYTES} bytes, chunked or not\n"),
                        ));
                    }
                    *pos += n;
                    // At most MAX_BODY_BYTES, so it fits.
                    self.at = if size == 0 { ChunkAt::Trailers } else { ChunkAt::Data(size as usize) };
                }
                ChunkAt::Data(left) => {
                    let k = left.min(rest.len());
                    if k == 0 {
                        return Ok(false);
                    }
                    self.body.extend_from_slice(&rest[..k]);
                    *pos += k;
                    self.at = if k == left { ChunkAt::DataEnd } else { ChunkAt::Data(left - k) };
                }
                ChunkAt::DataEnd => {
                    if rest.len() < 2 {
                        return Ok(false);
                    }
                    if &rest[..2] != b"\r\n" {
                        return Err(Reply::text(400, "a chunk's data is not followed by CRLF\n"));
                    }
                    *pos += 2;
                    self.at = ChunkAt::Size;
                }
                ChunkAt::Trailers => {
                    let mut fields = [httparse::EMPTY_HEADER; MAX_HEADERS];
                    match httparse::parse_headers(rest, &mut fields) {
                        Ok(httparse::Status::Complete((n, _))) if n <= MAX_HEAD_BYTES => {
                            *pos += n;
                            self.at = ChunkAt::Done;
                        }
                        Ok(httparse::Status::Partial) if rest.len() <= MAX_HEAD_BYTES => return Ok(false),
                        Ok(_) => {
                            return Err(Reply::text(
                                431,
                                format!("a body's trailer is at most {MAX_HEAD_BYTES} bytes\n"),
                            ));
                        }
                        Err(httparse::Error::TooManyHeaders) => {
                            return Err(Reply::text(
                                431,
                                format!("a body's trailer has at most {MAX_HEADERS} fields\n"),
                            ));
                        }
                        Err(e) => return Err(Reply::text(400, format!("a body's trailer is malformed: {e}\n"))),
                    }
                }
                ChunkAt::Done => return Ok(true),
            }
        }
    }

    /// The body decoded so far (all of it once [`Chunked::take`] said it is whole).
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The body, taken out.
    pub fn into_body(self) -> Vec<u8> {
        self.body
    }
}

/// Reads more of the connection into `buf`: `Ok(false)` when the client closed it, an error
/// when `deadline` passed, `stop` was set, or the socket failed.
fn fill(s: &mut TcpStream, buf: &mut Vec<u8>, deadline: Instant, stop: &AtomicBool) -> std::io::Result<bool> {
    let mut chunk = [0u8; 8192];
    loop {
        if stop.load(Ordering::Relaxed) {
            return Err(std::io::Error::other("stopping"));
        }
        if Instant::now() >= deadline {
            return Err(ErrorKind::TimedOut.into());
        }
        match s.read(&mut chunk) {
            Ok(0) => return Ok(false),
            Ok(n) => {
                buf.extend_from_slice(&chunk[..n]);
                return Ok(true);
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::Interrupted) => {}
            Err(e) => return Err(e),
        }
    }
}

/// Answers the requests of one connection, in order, until it closes (or is closed to make
/// room, [`serve`]), fails, stays idle past [`IDLE`], sends a request it refuses, or
/// `stop` is set; tells `slot` where it is.
fn connection(
    mut s: TcpStream,
    slot: &Slot,
    stop: &AtomicBool,
    handler: &Handler,
    refusals: &Refusals,
) -> std::io::Result<()> {
    s.set_nonblocking(false)?;
    s.set_read_timeout(Some(POLL))?;
    s.set_write_timeout(Some(WRITE_TIMEOUT))?;
    let _ = s.set_nodelay(true);
    let mut buf: Vec<u8> = Vec::with_capacity(4096);
    loop {
        // The head: the idle wait, then (from its first byte) the request's deadline.
        let mut deadline = if buf.is_empty() { Instant::now() + IDLE } else { Instant::now() + REQUEST_DEADLINE };
        if !slot.enter(if buf.is_empty() { Phase::Idle } else { Phase::Reading }) {
            return Ok(());
        }
        let head = loop {
            if !buf.is_empty() {
                match parse_head(&buf) {
                    Ok(Some(h)) => break h,
                    Ok(None) => {}
                    Err(r) => {
                        refusals.count_status(r.status);
                        return write_reply(&mut s, &r, false, true);
                    }
                }
            }
            let was_empty = buf.is_empty();
            // Past the deadline with a request begun: counted; idle, or stopping: not.
            if !fill(&mut s, &mut buf, deadline, stop).inspect_err(|e| {
                if !was_empty && e.kind() == ErrorKind::TimedOut {
                    refusals.count("deadline");
                }
            })? {
                return Ok(());
            }
            if was_empty {
                deadline = Instant::now() + REQUEST_DEADLINE;
                if !slot.enter(Phase::Reading) {
                    return Ok(());
                }
            }
        };
        buf.drain(..head.len);
        if head.expect_continue && (head.body > buf.len() || (head.chunked && buf.is_empty())) {
            s.write_all(b"HTTP/1.1 100 Continue\r\n\r\n")?;
        }
        let more = |s: &mut TcpStream, buf: &mut Vec<u8>| {
            fill(s, buf, deadline, stop).inspect_err(|e| {
                if e.kind() == ErrorKind::TimedOut {
                    refusals.count("deadline");
                }
            })
        };
        let body: Vec<u8> = if head.chunked {
            let mut chunked = Chunked::default();
            loop {
                match chunked.take(&mut buf) {
                    Ok(true) => break chunked.into_body(),
                    Ok(false) => {
                        if !more(&mut s, &mut buf)? {
                            return Ok(());
                        }
                    }
                    Err(r) => {
                        refusals.count_status(r.status);
                        return write_reply(&mut s, &r, false, true);
                    }
                }
            }
        } else {
            while buf.len() < head.body {
                if !more(&mut s, &mut buf)? {
                    return Ok(());
                }
            }
            buf.drain(..head.body).collect()
        };
        // A connection closed to make room runs no request, even one whole in its buffer.
        if !slot.enter(Phase::Answering) {
            return Ok(());
        }
        let reply = handler(&head.method, &head.target, &body);
        let close = !head.keep_alive || stop.load(Ordering::Relaxed);
        write_reply(&mut s, &reply, head.method == "HEAD", close)?;
        if close {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn echo() -> Arc<Handler> {
        Arc::new(|m: &str, t: &str, b: &[u8]| Reply::text(200, format!("{m} {t} {}\n", b.len())))
    }

    fn start() -> (SocketAddr, Arc<AtomicBool>) {
        let (addr, stop, _) = start_counted();
        (addr, stop)
    }

    fn start_counted() -> (SocketAddr, Arc<AtomicBool>, Arc<Refusals>) {
        let stop = Arc::new(AtomicBool::new(false));
        let refusals = Arc::new(Refusals::default());
        (serve("127.0.0.1:0".parse().unwrap(), stop.clone(), echo(), refusals.clone()).unwrap(), stop, refusals)
    }

    /// Sends `raw` from 127.0.0.1, then reads until the server closes the connection (or 5 s
    /// pass).
    fn exchange(addr: SocketAddr, raw: &[u8]) -> String {
        exchange_from(1, addr, raw)
    }

    /// Sends `head` (its request line and headers, without the blank line) asking
    /// `Expect: 100-continue`; once the `100 Continue` comes, sends `body`; returns the rest.
    fn continued(addr: SocketAddr, head: &str, body: &[u8]) -> String {
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.write_all(format!("{head}\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n").as_bytes()).unwrap();
        let mut first = [0u8; 25];
        c.read_exact(&mut first).unwrap();
        assert_eq!(&first, b"HTTP/1.1 100 Continue\r\n\r\n");
        c.write_all(body).unwrap();
        let mut rest = String::new();
        c.read_to_string(&mut rest).unwrap();
        rest
    }

    #[test]
    fn requests_in_a_row_and_pipelined_on_one_connection() {
        let (addr, stop) = start();
        let out = exchange(
            addr,
            b"GET /a HTTP/1.1\r\nHost: x\r\n\r\nPOST /b?q=1 HTTP/1.1\r\nContent-Length: 3\r\n\r\nxyzHEAD /c HTTP/1.1\r\nConnection: close\r\n\r\n",
        );
        let heads: Vec<&str> = out.split("HTTP/1.1 ").skip(1).collect();
        assert_eq!(heads.len(), 3, "{out}");
        assert!(heads[0].starts_with("200 OK") && heads[0].ends_with("GET /a 0\n"), "{out}");
        assert!(heads[1].ends_with("POST /b?q=1 3\n"), "{out}");
        // HEAD: the length of the body it would have, no body.
        assert!(heads[2].contains("Content-Length: 10\r\n") && heads[2].ends_with("\r\n\r\n"), "{out}");
        // HTTP/1.0 closes after one answer unless asked to keep the connection.
        let out = exchange(addr, b"GET /d HTTP/1.0\r\n\r\nGET /e HTTP/1.0\r\n\r\n");
        assert_eq!(out.matches("HTTP/1.1 200").count(), 1, "{out}");
        stop.store(true, Ordering::Relaxed);
    }

    #[test]
    fn lengths_a_client_declares_are_bounded_before_anything_is_read() {
        let (addr, stop, refusals) = start_counted();
        // Once the end of the process: a drain sized by the declared length.
        let out = exchange(addr, b"POST /x HTTP/1.1\r\nContent-Length: 999999999999999\r\n\r\n0123");
        assert!(out.starts_with("HTTP/1.1 413 ") && out.contains("at most 1048576 bytes"), "{out}");
        let big = format!("POST /x HTTP/1.1\r\nContent-Length: {}\r\n\r\n", MAX_BODY_BYTES + 1);
        assert!(exchange(addr, big.as_bytes()).starts_with("HTTP/1.1 413 "));
        let exact = format!("POST /x HTTP/1.1\r\nContent-Length: {MAX_BODY_BYTES}\r\nConnection: close\r\n\r\n");
        let mut raw = exact.into_bytes();
        raw.extend(std::iter::repeat_n(b'a', MAX_BODY_BYTES));
        assert!(exchange(addr, &raw).ends_with(&format!("POST /x {MAX_BODY_BYTES}\n")));
        let out = exchange(addr, b"POST /x HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n");
        assert!(out.starts_with("HTTP/1.1 501 ") && out.contains("`gzip`"), "{out}");
        let out = exchange(addr, b"POST /x HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab");
        assert!(out.starts_with("HTTP/1.1 400 "), "{out}");
        let out = exchange(addr, b"POST /x HTTP/1.1\r\nContent-Length: -1\r\n\r\n");
        assert!(out.starts_with("HTTP/1.1 400 "), "{out}");
        let mut long = b"GET /x HTTP/1.1\r\nX: ".to_vec();
        long.extend(std::iter::repeat_n(b'a', MAX_HEAD_BYTES + 10));
        assert!(exchange(addr, &long).starts_with("HTTP/1.1 431 "));
        let many: String = (0..MAX_HEADERS + 1).map(|i| format!("X{i}: y\r\n")).collect();
        assert!(exchange(addr, format!("GET /x HTTP/1.1\r\n{many}\r\n").as_bytes()).starts_with("HTTP/1.1 431 "));
        assert!(exchange(addr, b"\x00\x01garbage\r\n\r\n").starts_with("HTTP/1.1 400 "));
        // Expect: 100-continue is answered before the body comes.
        let rest = continued(addr, "POST /x HTTP/1.1\r\nContent-Length: 2", b"ok");
        assert!(rest.starts_with("HTTP/1.1 200") && rest.ends_with("POST /x 2\n"), "{rest}");
        let out = exchange(addr, b"POST /x HTTP/1.1\r\nContent-Length: 2\r\nExpect: later\r\n\r\nok");
        assert!(out.starts_with("HTTP/1.1 417 "), "{out}");
        // Each refusal counted under its reason.
        let want = [
            ("malformed", 3),
            ("body_too_large", 2),
            ("expectation", 1),
            ("head_too_large", 2),
            ("transfer_coding", 1),
        ];
        let counts = refusals.counts();
        for (reason, n) in want {
            assert!(counts.contains(&(reason, n)), "{reason}: {counts:?}");
        }
        assert!(counts.contains(&("busy", 0)) && counts.contains(&("deadline", 0)), "{counts:?}");
        stop.store(true, Ordering::Relaxed);
    }

    #[test]
    fn slow_clients_hold_up_no_other_request() {
        let (addr, stop) = start();
        // Clients that stop inside a head and inside a body (declaring 1 MiB, sending 10 bytes).
        let mut held = Vec::new();
        for i in 0..8 {
            let mut c = TcpStream::connect(addr).unwrap();
            if i % 2 == 0 {
                c.write_all(b"GET /met").unwrap();
            } else {
                c.write_all(b"POST /r HTTP/1.1\r\nContent-Length: 1048576\r\n\r\n0123456789").unwrap();
            }
            held.push(c);
        }
        thread::sleep(Duration::from_millis(200));
        let start = Instant::now();
        let out = exchange(addr, b"GET /ready HTTP/1.1\r\nConnection: close\r\n\r\n");
        assert!(out.ends_with("GET /ready 0\n"), "{out}");
        assert!(start.elapsed() < Duration::from_secs(2), "an answer waited {:?}", start.elapsed());
        stop.store(true, Ordering::Relaxed);
    }

    #[test]
    fn a_request_is_whole_within_its_deadline_or_its_connection_closes() {
        let (addr, stop, refusals) = start_counted();
        let mut c = TcpStream::connect(addr).unwrap();
        c.set_read_timeout(Some(REQUEST_DEADLINE + Duration::from_secs(5))).unwrap();
        let start = Instant::now();
        c.write_all(b"GET /slow HTTP/1.1\r\n").unwrap();
        // One header line a second: never whole within the deadline.
        let mut out = Vec::new();
        for _ in 0..(REQUEST_DEADLINE.as_secs() + 3) {
            thread::sleep(Duration::from_secs(1));
            if c.write_all(b"X: y\r\n").is_err() {
                break;
            }
        }
        let _ = c.read_to_end(&mut out);
        assert!(out.is_empty(), "{}", String::from_utf8_lossy(&out));
        let took = start.elapsed();
        assert!(took >= REQUEST_DEADLINE && took < REQUEST_DEADLINE + Duration::from_secs(4), "{took:?}");
        assert!(refusals.counts().contains(&("deadline", 1)), "{:?}", refusals.counts());
        stop.store(true, Ordering::Relaxed);
    }

    /// A connection to `addr` from loopback address 127.0.0.`host`.
    fn connect_from(host: u8, addr: SocketAddr) -> TcpStream {
        let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        s.bind(&SocketAddr::from(([127, 0, 0, host], 0)).into()).unwrap();
        s.connect(&addr.into()).unwrap();
        s.into()
    }

    /// Sends `raw` from 127.0.0.`host`, then reads until the server closes the connection (or
    /// 5 s pass).
    fn exchange_from(host: u8, addr: SocketAddr, raw: &[u8]) -> String {
        let mut c = connect_from(host, addr);
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        c.write_all(raw).unwrap();
        let mut out = Vec::new();
        let _ = c.read_to_end(&mut out);
        String::from_utf8_lossy(&out).into_owned()
    }

    /// A server whose handler answers `/hold` only once `release` is set (its connections stay
    /// answering; `holding` counts them), and anything else as [`echo`].
    fn start_holding() -> (SocketAddr, Arc<AtomicBool>, Arc<Refusals>, Arc<AtomicBool>, Arc<AtomicU64>) {
        let (release, holding) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicU64::new(0)));
        let (r, h) = (release.clone(), holding.clone());
        let handler: Arc<Handler> = Arc::new(move |m: &str, t: &str, b: &[u8]| {
            if t == "/hold" {
                h.fetch_add(1, Ordering::SeqCst);
                while !r.load(Ordering::SeqCst) {
                    thread::sleep(Duration::from_millis(5));
                }
            }
            Reply::text(200, format!("{m} {t} {}\n", b.len()))
        });
        let (stop, refusals) = (Arc::new(AtomicBool::new(false)), Arc::new(Refusals::default()));
        let addr = serve("127.0.0.1:0".parse().unwrap(), stop.clone(), handler, refusals.clone()).unwrap();
        (addr, stop, refusals, release, holding)
    }

    /// Waits (at most 20 s) until `n` requests are in the holding handler.
    fn until_holding(holding: &AtomicU64, n: u64) {
        let start = Instant::now();
        while holding.load(Ordering::SeqCst) < n {
            assert!(start.elapsed() < Duration::from_secs(20), "{} of {n} held", holding.load(Ordering::SeqCst));
            thread::sleep(Duration::from_millis(10));
        }
    }

    /// Whether the server closed `c` without a byte (within 5 s).
    fn closed_unanswered(c: &mut TcpStream) -> bool {
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut out = Vec::new();
        matches!(c.read_to_end(&mut out), Ok(0))
    }

    #[test]
    fn past_the_connection_bounds_a_client_is_told_busy() {
        let (addr, stop, refusals, release, holding) = start_holding();
        let get = b"GET /x HTTP/1.1\r\nConnection: close\r\n\r\n";
        let hold = |host: u8| {
            let mut c = connect_from(host, addr);
            c.write_all(b"GET /hold HTTP/1.1\r\n\r\n").unwrap();
            c
        };
        // One address holding its share (answering: never closed to make room): it is refused
        // more, another address is served.
        let mut held: Vec<TcpStream> = (0..MAX_CONNECTIONS_PER_PEER).map(|_| hold(2)).collect();
        until_holding(&holding, MAX_CONNECTIONS_PER_PEER as u64);
        let out = exchange_from(2, addr, get);
        assert!(out.starts_with("HTTP/1.1 503 ") && out.contains("from this address"), "{out}");
        assert!(exchange_from(3, addr, get).starts_with("HTTP/1.1 200 "));
        // Every slot held, by as many addresses as it takes, none of them idle or slow: anyone
        // is refused.
        let peers = MAX_CONNECTIONS / MAX_CONNECTIONS_PER_PEER;
        for host in 3..(2 + peers as u8) {
            held.extend((0..MAX_CONNECTIONS_PER_PEER).map(|_| hold(host)));
        }
        until_holding(&holding, MAX_CONNECTIONS as u64);
        let out = exchange_from(100, addr, get);
        assert!(out.starts_with("HTTP/1.1 503 ") && out.contains("too many connections\n"), "{out}");
        let counts = refusals.counts();
        assert!(counts.contains(&("busy", 2)) && counts.contains(&("evicted", 0)), "{counts:?}");
        release.store(true, Ordering::SeqCst);
        drop(held);
        // Their threads answer, see the closes, and give their slots back.
        thread::sleep(Duration::from_millis(500));
        assert!(exchange_from(2, addr, get).starts_with("HTTP/1.1 200 "));
        assert!(exchange_from(100, addr, get).starts_with("HTTP/1.1 200 "));
        stop.store(true, Ordering::Relaxed);
    }

    #[test]
    fn with_every_slot_taken_the_connection_idle_longest_makes_room() {
        let (addr, stop, refusals) = start_counted();
        // Kept-alive connections from four addresses, each answered once and idle since: the
        // first idle longest.
        let peers = MAX_CONNECTIONS / MAX_CONNECTIONS_PER_PEER;
        let mut idle = Vec::new();
        for i in 0..MAX_CONNECTIONS {
            let mut c = connect_from(2 + (i % peers) as u8, addr);
            c.write_all(b"GET /once HTTP/1.1\r\n\r\n").unwrap();
            let mut answer = [0u8; 256];
            let n = c.read(&mut answer).unwrap();
            assert!(answer[..n].ends_with(b"GET /once 0\n"), "{}", String::from_utf8_lossy(&answer[..n]));
            idle.push(c);
            if i == 0 {
                thread::sleep(Duration::from_millis(50));
            }
        }
        thread::sleep(Duration::from_millis(50));
        // A new client is served; the connection idle longest was closed for it, unanswered.
        let get = b"GET /x HTTP/1.1\r\nConnection: close\r\n\r\n";
        assert!(exchange_from(100, addr, get).starts_with("HTTP/1.1 200 "));
        assert!(closed_unanswered(&mut idle[0]));
        let counts = refusals.counts();
        assert!(counts.contains(&("evicted", 1)) && counts.contains(&("busy", 0)), "{counts:?}");
        // The others were kept: the second still answers on its connection.
        idle[1].write_all(b"GET /again HTTP/1.1\r\nConnection: close\r\n\r\n").unwrap();
        let mut out = String::new();
        idle[1].read_to_string(&mut out).unwrap();
        assert!(out.ends_with("GET /again 0\n"), "{out}");
        stop.store(true, Ordering::Relaxed);
    }

    #[test]
    fn with_every_slot_taken_the_addresses_holding_most_make_room_and_a_lone_client_keeps_its_own() {
        let (addr, stop, refusals, release, holding) = start_holding();
        // A lone client's kept-alive connection (a scraper, a heartbeat), idle longest of all.
        let mut lone = connect_from(9, addr);
        let ask = |c: &mut TcpStream, path: &str| {
            c.write_all(format!("GET {path} HTTP/1.1\r\n\r\n").as_bytes()).unwrap();
            let mut answer = [0u8; 256];
            let n = c.read(&mut answer).unwrap();
            String::from_utf8_lossy(&answer[..n]).into_owned()
        };
        assert!(ask(&mut lone, "/lone").ends_with("GET /lone 0\n"));
        thread::sleep(Duration::from_millis(50));
        // Every other slot held by four addresses: requests begun and never finished, the first
        // begun earliest, and last a connection that sent nothing yet.
        let peers = MAX_CONNECTIONS / MAX_CONNECTIONS_PER_PEER;
        let mut slow = Vec::new();
        for i in 0..MAX_CONNECTIONS - 2 {
            let mut c = connect_from(2 + (i % peers) as u8, addr);
            c.write_all(b"GET /slo").unwrap();
            slow.push(c);
            if i < peers {
                thread::sleep(Duration::from_millis(50));
            }
        }
        let mut fresh = connect_from(2 + ((MAX_CONNECTIONS - 2) % peers) as u8, addr);
        thread::sleep(Duration::from_millis(300));
        // Newcomers (each kept in the handler, so it keeps its slot) displace those addresses'
        // connections, the idle one first though it came last, then the requests begun
        // earliest, one address after another as each comes to hold the most.
        let newcomer = |host: u8, n: u64| {
            let mut c = connect_from(host, addr);
            c.write_all(b"GET /hold HTTP/1.1\r\nConnection: close\r\n\r\n").unwrap();
            until_holding(&holding, n);
            c
        };
        let mut served = vec![newcomer(100, 1)];
        assert!(closed_unanswered(&mut fresh));
        served.push(newcomer(101, 2));
        assert!(closed_unanswered(&mut slow[0]));
        served.push(newcomer(102, 3));
        assert!(closed_unanswered(&mut slow[1]));
        // The lone client was idle longest, yet kept its connection.
        assert!(ask(&mut lone, "/again").ends_with("GET /again 0\n"));
        // Each of the four now holds 63, the newcomers 1: a newcomer from one of the four would
        // hold more than any other after a swap, so it is refused.
        let get = b"GET /x HTTP/1.1\r\nConnection: close\r\n\r\n";
        let out = exchange_from(2, addr, get);
        assert!(out.starts_with("HTTP/1.1 503 ") && out.contains("too many connections\n"), "{out}");
        let counts = refusals.counts();
        assert!(counts.contains(&("evicted", 3)) && counts.contains(&("busy", 1)), "{counts:?}");
        release.store(true, Ordering::SeqCst);
        for mut c in served {
            let mut out = String::new();
            c.read_to_string(&mut out).unwrap();
            assert!(out.ends_with("GET /hold 0\n"), "{out}");
        }
        drop(slow);
        stop.store(true, Ordering::Relaxed);
    }

    #[test]
    fn chunked_bodies_are_taken_within_the_same_bounds() {
        let (addr, stop, refusals) = start_counted();
        // Chunks with extensions and a trailer, a request pipelined after it.
        let out = exchange(
            addr,
            b"POST /c HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3;x=y\r\nabc\r\nA\r\n0123456789\r\n0\r\nX-T: 1\r\n\r\nGET /n HTTP/1.1\r\nConnection: close\r\n\r\n",
        );
        assert!(out.contains("POST /c 13\n") && out.ends_with("GET /n 0\n"), "{out}");
        // 100-continue before a chunked body.
        let rest = continued(addr, "POST /e HTTP/1.1\r\nTransfer-Encoding: chunked", b"2\r\nok\r\n0\r\n\r\n");
        assert!(rest.ends_with("POST /e 2\n"), "{rest}");
        // A chunk that would take the body past its bound: refused before its data comes.
        let over = format!(
            "POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n10\r\n0123456789abcdef\r\n{:x}\r\n",
            MAX_BODY_BYTES - 15
        );
        assert!(exchange(addr, over.as_bytes()).starts_with("HTTP/1.1 413 "));
        let huge = b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nffffffffffffffff\r\n";
        assert!(exchange(addr, huge).starts_with("HTTP/1.1 4"));
        for bad in [
            &b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n3\r\nabc\r\n0\r\n\r\n"[..],
            b"POST /x HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
            b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked, chunked\r\n\r\n0\r\n\r\n",
            b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n0\r\n\r\n",
            b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n\r\n",
        ] {
            let out = exchange(addr, bad);
            assert!(out.starts_with("HTTP/1.1 400 "), "{}: {out}", String::from_utf8_lossy(bad));
        }
        let mut long = b"POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1;".to_vec();
        long.extend(std::iter::repeat_n(b'e', MAX_CHUNK_LINE + 10));
        assert!(exchange(addr, &long).starts_with("HTTP/1.1 400 "));
        let many: String = (0..MAX_HEADERS + 1).map(|i| format!("T{i}: y\r\n")).collect();
        let trailers = format!("POST /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n{many}\r\n");
        assert!(exchange(addr, trailers.as_bytes()).starts_with("HTTP/1.1 431 "));
        let counts = refusals.counts();
        for (reason, n) in [("malformed", 7), ("body_too_large", 1), ("head_too_large", 1)] {
            assert!(counts.iter().any(|&(r, c)| r == reason && c >= n), "{reason}: {counts:?}");
        }
        stop.store(true, Ordering::Relaxed);
    }

    proptest::proptest! {
        /// A body cut into any chunks (extensions on some), with or without trailers, fed in any
        /// pieces, decodes to itself and leaves what follows it in the buffer.
        #[test]
        fn a_chunked_body_decodes_to_itself_however_it_is_cut_and_fed(
            body in proptest::collection::vec(proptest::num::u8::ANY, 0..3000),
            cuts in proptest::collection::vec(1usize..700, 0..12),
            feeds in proptest::collection::vec(1usize..300, 1..40),
            ext in proptest::bool::ANY,
            trailer in proptest::bool::ANY,
        ) {
            let mut wire = Vec::new();
            let mut at = 0;
            for (i, cut) in cuts.iter().chain(std::iter::once(&usize::MAX)).enumerate() {
                let end = at + (*cut).min(body.len() - at);
                if end == at {
                    break;
                }
                let ext = if ext && i % 2 == 0 { ";name=\"v\"" } else { "" };
                wire.extend(format!("{:X}{ext}\r\n", end - at).bytes());
                wire.extend(&body[at..end]);
                wire.extend(b"\r\n");
                at = end;
            }
            wire.extend(b"0\r\n");
            if trailer {
                wire.extend(b"Digest: x\r\n");
            }
            wire.extend(b"\r\nNEXT");
            let (mut c, mut buf, mut fed, mut whole) = (Chunked::default(), Vec::new(), 0, false);
            for f in feeds.iter().cycle() {
                let take = (*f).min(wire.len() - fed);
                buf.extend_from_slice(&wire[fed..fed + take]);
                fed += take;
                if c.take(&mut buf).unwrap() {
                    whole = true;
                    break;
                }
                proptest::prop_assert!(take > 0, "all of it fed and not whole");
            }
            proptest::prop_assert!(whole);
            // What follows the body stays, whatever was fed beyond it.
            buf.extend_from_slice(&wire[fed..]);
            proptest::prop_assert_eq!(&buf[..], b"NEXT");
            proptest::prop_assert_eq!(c.body(), &body[..]);
        }
    }

    #[test]
    fn a_connection_closed_to_make_room_runs_no_request_and_an_answering_one_is_not_closed() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let (a, b) = (TcpStream::connect(listener.local_addr().unwrap()).unwrap(), listener.accept().unwrap().0);
        let (slots, refusals) = (Arc::new(Slots::default()), Refusals::default());
        let ip = IpAddr::from([127, 0, 0, 2]);
        let (first, second) =
            (Slots::take(&slots, &a, ip, &refusals).unwrap(), Slots::take(&slots, &b, ip, &refusals).unwrap());
        assert!(first.enter(Phase::Answering) && second.enter(Phase::Reading));
        // A newcomer from an address holding fewer: the answering one is passed over.
        assert!(slots.lock().evict(IpAddr::from([127, 0, 0, 3])));
        assert!(first.enter(Phase::Idle), "the answering connection was kept");
        assert!(!second.enter(Phase::Answering), "the reading one was closed and may not run its request");
        assert_eq!(slots.lock().conns.len(), 1);
        assert_eq!(slots.lock().by_peer.get(&ip), Some(&1));
        // Its slot given back once: dropping it later frees nothing more.
        drop(second);
        assert_eq!(slots.lock().by_peer.get(&ip), Some(&1));
        drop(first);
        assert!(slots.lock().conns.is_empty() && slots.lock().by_peer.is_empty());
    }

    #[test]
    fn an_ipv6_peer_is_its_64_and_a_mapped_ipv4_one_its_ipv4_address() {
        let v6 = |s: &str| IpAddr::V6(s.parse().unwrap());
        assert_eq!(peer_of(v6("2001:db8:1:2:aaaa:bbbb:cccc:dddd")), v6("2001:db8:1:2::"));
        assert_eq!(peer_of(v6("2001:db8:1:2::1")), peer_of(v6("2001:db8:1:2:ffff::9")));
        assert_ne!(peer_of(v6("2001:db8:1:2::1")), peer_of(v6("2001:db8:1:3::1")));
        assert_eq!(peer_of(v6("::ffff:192.0.2.7")), IpAddr::from([192, 0, 2, 7]));
        assert_eq!(peer_of(IpAddr::from([192, 0, 2, 7])), IpAddr::from([192, 0, 2, 7]));
        assert_eq!(peer_of(v6("::1")), v6("::"));
    }

    /// docs/dispatch.md's table of limits is the contract: each row's value is the code's.
    #[test]
    fn the_docs_give_each_limit() {
        let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/dispatch.md")).unwrap();
        let row = |starts: &str| -> String {
            doc.lines()
                .find(|l| l.starts_with(starts))
                .unwrap_or_else(|| panic!("docs/dispatch.md: no row `{starts}`"))
                .to_string()
        };
        let body = row("| a request's body");
        assert!(body.contains(&format!("{} MiB", MAX_BODY_BYTES >> 20)) && body.contains("1,048,576"), "{body}");
        let head = row("| a request line and headers");
        assert!(head.contains(&format!("| {} KiB, {MAX_HEADERS} headers |", MAX_HEAD_BYTES >> 10)), "{head}");
        let chunked = row("| a chunked body");
        let line = format!("{},{:03}", MAX_CHUNK_LINE / 1000, MAX_CHUNK_LINE % 1000);
        assert!(chunked.contains(&format!("line (size and extensions) {line} bytes")), "{chunked}");
        let whole = row("| a request, from its first byte");
        assert!(whole.contains(&format!("| {} s |", REQUEST_DEADLINE.as_secs())), "{whole}");
        let idle = row("| a kept-alive connection");
        assert!(idle.contains(&format!("| {} s |", IDLE.as_secs())), "{idle}");
        let conns = row("| connections at once |");
        assert!(conns.contains(&format!("| {MAX_CONNECTIONS} |")), "{conns}");
        let full = row("| connections at once, none of them to close |");
        assert!(full.contains(&format!("| {MAX_CONNECTIONS} |")), "{full}");
        let peer = row("| connections at once from one address");
        assert!(peer.contains(&format!("| {MAX_CONNECTIONS_PER_PEER} |")), "{peer}");
    }

    #[test]
    fn a_held_address_is_an_error_naming_it() {
        let held = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = held.local_addr().unwrap();
        let err = serve(addr, Arc::new(AtomicBool::new(true)), echo(), Arc::default()).unwrap_err().to_string();
        assert!(err.contains(&addr.to_string()) && err.contains("in use"), "{err}");
    }
}
