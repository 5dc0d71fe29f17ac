//! RpcNIC's RPC endpoint over QNP (docs/rpc.md, "The RPC endpoint"): RPC calls and replies
//! carried as QNP requests and responses of application [`APP_ID`], so they cross a lossy network
//! exactly once (QNP retransmits, suppresses duplicates and answers a repeated call with the
//! reply it remembers: the handler never runs twice).
//!
//! A call carries the RPC header — the method (a QNP dispatch field), the request message's
//! class id, the caller's request id and flags — and the request's protobuf bytes; a reply the
//! request id, a [`Status`], an error text naming what was wrong, and the response's bytes.
//! Bodies are opaque here: the service decodes them with its schema table (`tern-rpc`). This
//! crate sits below the engines, beside `tern-qnp`.
//!
//! A body up to [`MAX_MESSAGE`] (16 MiB) may be longer than one QNP request carries
//! ([`max_body`]: 255 packets): it then travels in parts, each its own QNP request — a call's
//! parts flagged [`MORE`] and acknowledged one by one, a reply's fetched part by part with
//! [`NEXT`] — so each part crosses exactly once and the handler runs once, on the whole call.
//! A server holds at most [`HELD_LIMIT`] of parts, for at most [`PART_TIMEOUT`] of silence.
//!
//! ```
//! use std::time::Duration;
//! use tern_endpoint::{Header, RpcClient, RpcServer, Status};
//! use tern_io::{Pool, Port, mem};
//! use tern_qnp::QnpConfig;
//!
//! let pool = Pool::new(1024, 2048);
//! let (c, s) = mem::pair(&pool, 1024);
//! let addr = s.local_addr();
//! let mut server = RpcServer::new(s, &pool, QnpConfig::default());
//! let mut client = RpcClient::new(c, &pool, QnpConfig::default(), addr);
//! client.call(Header { method: 1, class_id: 4, request_id: 77, flags: 0 }, b"\x08\x01").unwrap();
//! client.flush().unwrap();
//! let mut calls = Vec::new();
//! server.recv(&mut calls, Duration::from_secs(1)).unwrap();
//! let call = calls.pop().unwrap();
//! assert_eq!((call.header.method, call.header.request_id, &call.body[..]), (1, 77, &b"\x08\x01"[..]));
//! server.reply(call.handle, call.header.request_id, Status::Ok, "", b"\x10\x02").unwrap();
//! server.flush().unwrap();
//! let mut replies = Vec::new();
//! client.recv(&mut replies, Duration::from_secs(1)).unwrap();
//! let r = replies.pop().unwrap().unwrap();
//! assert_eq!((r.request_id, r.status, &r.body[..]), (77, Status::Ok, &b"\x10\x02"[..]));
//! ```
#![forbid(unsafe_code)]

use std::collections::HashMap;
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tern_io::{Pool, Port};
use tern_qnp::runtime::{Completion, CompletionError, QnpClient, QnpServer};
use tern_qnp::{QnpConfig, ReqError, ReqHandle, SegmentError};

/// The call and reply frames (generated from `proto/endpoint.proto`).
pub mod frames {
    include!(concat!(env!("OUT_DIR"), "/endpoint.rs"));
}

use frames::{Call, Reply};

/// The QNP application id RPC calls travel under.
pub const APP_ID: u8 = 7;
/// The QNP request type of a call.
pub const CALL: u8 = 1;

/// The largest call or reply body: 16 MiB. A body longer than one QNP request carries
/// ([`max_body`]) travels in parts, one QNP request at a time.
pub const MAX_MESSAGE: usize = 16 << 20;
/// Call flag: the call's body goes on in another part, sent when this part is acknowledged.
/// Reply flag: the reply's body goes on; the client asks for the next part with [`NEXT`].
pub const MORE: u32 = 1;
/// Call flag: send the next part of this request id's reply (the body is empty).
pub const NEXT: u32 = 2;
/// The flags the endpoint uses itself; a caller's own flags are the other bits.
pub const ENDPOINT_FLAGS: u32 = MORE | NEXT;
/// The most a server holds for calls and replies in parts, all together: 64 MiB (each held
/// call or reply counted as its bytes and [`HELD_ENTRY_BYTES`]).
pub const HELD_LIMIT: usize = 64 << 20;
/// What holding one call or reply in parts counts besides its bytes.
pub const HELD_ENTRY_BYTES: usize = 256;
/// How long a server keeps a call's parts, or a reply's rest, without hearing from the client.
pub const PART_TIMEOUT: Duration = Duration::from_secs(10);

/// The RPC header of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Header {
    /// The method called.
    pub method: u32,
    /// The request message's class id in the service's schema table.
    pub class_id: u32,
    /// The caller's id for the call (echoed in the reply).
    pub request_id: u64,
    /// The caller's flags (the bits of [`ENDPOINT_FLAGS`] are the endpoint's own: a call may
    /// not set them, and a server never shows them).
    pub flags: u32,
}

/// How a call ended, as its reply says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Status {
    /// Answered: the body is the response.
    Ok,
    /// The request did not decode or was not what the method takes (the error names the field
    /// and byte offset).
    BadRequest,
    /// No such method.
    UnknownMethod,
    /// No such class, or not the class the method takes.
    UnknownClass,
    /// The service failed.
    Internal,
    /// The service had no room for the call.
    Overloaded,
    /// A status this endpoint does not know (a newer peer's), with its code.
    Other(u32),
}

impl Status {
    /// Every known status, for metrics.
    pub const ALL: [Status; 6] = [
        Status::Ok,
        Status::BadRequest,
        Status::UnknownMethod,
        Status::UnknownClass,
        Status::Internal,
        Status::Overloaded,
    ];

    /// Its code on the wire.
    pub fn code(self) -> u32 {
        match self {
            Status::Ok => 0,
            Status::BadRequest => 1,
            Status::UnknownMethod => 2,
            Status::UnknownClass => 3,
            Status::Internal => 4,
            Status::Overloaded => 5,
            Status::Other(c) => c,
        }
    }

    /// The status with `code`.
    pub fn from_code(code: u32) -> Status {
        Status::ALL.into_iter().find(|s| s.code() == code).unwrap_or(Status::Other(code))
    }

    /// Its name in metrics and JSON.
    pub fn name(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::BadRequest => "bad_request",
            Status::UnknownMethod => "unknown_method",
            Status::UnknownClass => "unknown_class",
            Status::Internal => "internal",
            Status::Overloaded => "overloaded",
            Status::Other(_) => "other",
        }
    }
}

/// A call a server received (once), with the handle to reply to it.
#[derive(Debug, Clone, PartialEq)]
pub struct Incoming {
    /// Pass to [`RpcServer::reply`].
    pub handle: ReqHandle,
    /// Its header.
    pub header: Header,
    /// The request message's bytes.
    pub body: Vec<u8>,
}

/// A reply a client received (once).
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The call's request id.
    pub request_id: u64,
    /// How it ended.
    pub status: Status,
    /// Flags.
    pub flags: u32,
    /// What was wrong (empty when it went well).
    pub error: String,
    /// The response message's bytes.
    pub body: Vec<u8>,
    /// Time from the call to its reply.
    pub latency: Duration,
}

/// A call that ended without a reply: the transport gave up (the server unreachable), or the
/// reply did not decode.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("call {request_id}: {error}")]
pub struct Failed {
    /// The call's request id.
    pub request_id: u64,
    /// Why.
    pub error: CompletionError,
}

/// The most body bytes one call or reply request carries under `cfg`: its packets per request
/// times each packet's payload, less the TLV records' headers and the other fields (QNP's header
/// counts packets in one byte, so at most 255 packets). A body is encoded as records of up to
/// 65535 bytes and cut where packets end, so a packet holds the pieces of at most two records:
/// two record headers a packet.
pub fn max_body(cfg: &QnpConfig) -> usize {
    let per_packet = cfg.payload_capacity().saturating_sub(2 * tern_wire::tlv::RECORD_HEADER_LEN);
    // The other fields: at most 4 records of up to 8 bytes in the first packet.
    (usize::from(cfg.max_pkts_per_request) * per_packet).saturating_sub(4 * (tern_wire::tlv::RECORD_HEADER_LEN + 8))
}

/// What a server did with calls and replies in parts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PartStats {
    /// Parts of calls taken (every part but the last).
    pub call_parts: u64,
    /// Calls put together from parts and delivered.
    pub calls_assembled: u64,
    /// Replies sent in parts, and parts sent after the first.
    pub replies_in_parts: u64,
    pub reply_parts: u64,
    /// Calls refused: their parts came to more than [`MAX_MESSAGE`] (answered `bad_request`).
    pub too_large: u64,
    /// Parts whose method or class differed from the call's first part's (`bad_request`).
    pub mismatched: u64,
    /// Calls or replies refused because the server held [`HELD_LIMIT`] (`overloaded`).
    pub over_budget: u64,
    /// Calls or replies dropped after [`PART_TIMEOUT`] without a word from their client.
    pub expired: u64,
    /// Requests for a reply's next part when none was held (`internal`).
    pub stray_next: u64,
    /// Calls that set the endpoint's flags both at once (`bad_request`).
    pub bad_flags: u64,
}

impl PartStats {
    /// The counters' names, in [`PartStats::named`]'s order (for metrics and JSON).
    pub const NAMES: [&'static str; 10] = [
        "call_parts",
        "calls_assembled",
        "replies_in_parts",
        "reply_parts",
        "too_large",
        "mismatched",
        "over_budget",
        "expired",
        "stray_next",
        "bad_flags",
    ];

    /// Each counter with its name.
    pub fn named(&self) -> [(&'static str, u64); 10] {
        let v = [
            self.call_parts,
            self.calls_assembled,
            self.replies_in_parts,
            self.reply_parts,
            self.too_large,
            self.mismatched,
            self.over_budget,
            self.expired,
            self.stray_next,
            self.bad_flags,
        ];
        std::array::from_fn(|i| (Self::NAMES[i], v[i]))
    }
}

/// A call being put together from its parts.
#[derive(Debug)]
struct Assembly {
    method: u32,
    class_id: u32,
    body: Vec<u8>,
    last: Instant,
}

/// The rest of a reply sent in parts.
#[derive(Debug)]
struct HeldReply {
    status: u32,
    body: Vec<u8>,
    sent: usize,
    last: Instant,
}

/// A server thread's RPC endpoint.
#[derive(Debug)]
pub struct RpcServer<P> {
    qnp: QnpServer<P>,
    cfg: QnpConfig,
    rx: Vec<tern_qnp::runtime::Request<Call>>,
    /// Calls in parts, and replies in parts, by client and request id.
    assembling: HashMap<(SocketAddr, u64), Assembly>,
    replies: HashMap<(SocketAddr, u64), HeldReply>,
    /// Bytes held for both (with [`HELD_ENTRY_BYTES`] each).
    held: usize,
    last_sweep: Instant,
    parts: PartStats,
}

impl<P: Port> RpcServer<P> {
    /// A server over `port`, taking calls (QNP application [`APP_ID`], request type [`CALL`],
    /// whose dispatch field is the method) and dropping any other request type.
    pub fn new(port: P, pool: &Pool, cfg: QnpConfig) -> RpcServer<P> {
        let memory = std::sync::Arc::new(tern_qnp::ExactlyOnce::new(&cfg, 1));
        RpcServer::with_memory(port, pool, cfg, memory)
    }

    /// A server that shares its exactly-once memory with the other threads of one service (so a
    /// retransmission that reaches another thread is answered from memory, not run again).
    pub fn with_memory(
        port: P,
        pool: &Pool,
        cfg: QnpConfig,
        memory: std::sync::Arc<tern_qnp::ExactlyOnce>,
    ) -> RpcServer<P> {
        let mut qnp = QnpServer::with_memory(port, pool, cfg.clone(), &[APP_ID], memory);
        qnp.declare_request_type(APP_ID, CALL, &[1]);
        RpcServer {
            qnp,
            cfg,
            rx: Vec::new(),
            assembling: HashMap::new(),
            replies: HashMap::new(),
            held: 0,
            last_sweep: Instant::now(),
            parts: PartStats::default(),
        }
    }

    /// Appends calls received (each once, a call in parts once it is whole) to `out`, waiting
    /// up to `timeout` for the first request; how many were appended (0 when what came was a
    /// part, answered here).
    pub fn recv(&mut self, out: &mut Vec<Incoming>, timeout: Duration) -> io::Result<usize> {
        self.rx.clear();
        self.qnp.recv_req::<Call>(&mut self.rx, timeout)?;
        let before = out.len();
        let mut rx = std::mem::take(&mut self.rx);
        for r in rx.drain(..) {
            if let Some(call) = self.take(r.handle, r.req) {
                out.push(call);
            }
        }
        self.rx = rx;
        self.sweep();
        Ok(out.len() - before)
    }

    /// A call as it arrives: a whole call (or the last part of one) to deliver; a part, a
    /// request for a reply's next part, or a call refused, answered here.
    fn take(&mut self, handle: ReqHandle, c: Call) -> Option<Incoming> {
        let key = (handle.peer, c.request_id);
        let now = Instant::now();
        if c.flags & ENDPOINT_FLAGS == ENDPOINT_FLAGS {
            self.parts.bad_flags += 1;
            self.answer(handle, c.request_id, Status::BadRequest, 0, "flags MORE and NEXT together", &[]);
            return None;
        }
        if c.flags & NEXT != 0 {
            self.next_part(handle, c.request_id);
            return None;
        }
        // A part, or the last of a call's parts: put it with those before it.
        let mut body = c.body;
        let assembled = self.assembling.contains_key(&key);
        if let Some(mut a) = self.assembling.remove(&key) {
            self.held -= a.body.len() + HELD_ENTRY_BYTES;
            if (a.method, a.class_id) != (c.method, c.class_id) {
                self.parts.mismatched += 1;
                let e = format!(
                    "a part of call {} names method {} class {}, its first part method {} class {}",
                    c.request_id, c.method, c.class_id, a.method, a.class_id
                );
                self.answer(handle, c.request_id, Status::BadRequest, 0, &e, &[]);
                return None;
            }
            a.body.extend_from_slice(&body);
            body = a.body;
        }
        // One check for a call and for its parts so far (one QNP request alone carries less).
        if body.len() > MAX_MESSAGE {
            self.parts.too_large += 1;
            let e = format!("call {}: its parts come to more than {MAX_MESSAGE} bytes", c.request_id);
            self.answer(handle, c.request_id, Status::BadRequest, 0, &e, &[]);
            return None;
        }
        if c.flags & MORE != 0 {
            if self.held + body.len() + HELD_ENTRY_BYTES > HELD_LIMIT {
                self.parts.over_budget += 1;
                let e = format!("the server holds {HELD_LIMIT} bytes of calls and replies in parts");
                self.answer(handle, c.request_id, Status::Overloaded, 0, &e, &[]);
                return None;
            }
            self.parts.call_parts += 1;
            self.held += body.len() + HELD_ENTRY_BYTES;
            self.assembling.insert(key, Assembly { method: c.method, class_id: c.class_id, body, last: now });
            // Acknowledged: the client sends the next part.
            self.answer(handle, c.request_id, Status::Ok, MORE, "", &[]);
            return None;
        }
        if assembled {
            self.parts.calls_assembled += 1;
        }
        Some(Incoming {
            handle,
            header: Header {
                method: c.method,
                class_id: c.class_id,
                request_id: c.request_id,
                flags: c.flags & !ENDPOINT_FLAGS,
            },
            body,
        })
    }

    /// Sends the next part of the reply held for `request_id`.
    fn next_part(&mut self, handle: ReqHandle, request_id: u64) {
        let key = (handle.peer, request_id);
        let chunk = self.reply_capacity("");
        let Some(h) = self.replies.get_mut(&key) else {
            self.parts.stray_next += 1;
            let e = format!("no reply in parts is held for call {request_id}");
            self.answer(handle, request_id, Status::Internal, 0, &e, &[]);
            return;
        };
        let end = (h.sent + chunk).min(h.body.len());
        let part = h.body[h.sent..end].to_vec();
        let status = h.status;
        h.sent = end;
        h.last = Instant::now();
        let more = end < h.body.len();
        if !more && let Some(h) = self.replies.remove(&key) {
            self.held -= h.body.len() + HELD_ENTRY_BYTES;
        }
        self.parts.reply_parts += 1;
        let reply = Reply { request_id, status, flags: if more { MORE } else { 0 }, error: String::new(), body: part };
        // A part is at most `reply_capacity` bytes: it segments.
        let _ = self.qnp.send_resp(handle, &reply);
    }

    /// A reply the endpoint makes itself (acknowledgements, refusals): small, so it segments.
    fn answer(&mut self, handle: ReqHandle, request_id: u64, status: Status, flags: u32, error: &str, body: &[u8]) {
        let reply = Reply { request_id, status: status.code(), flags, error: error.to_string(), body: body.to_vec() };
        let _ = self.qnp.send_resp(handle, &reply);
    }

    /// Body bytes one reply part carries beside `error`.
    fn reply_capacity(&self, error: &str) -> usize {
        max_body(&self.cfg).saturating_sub(error.len() + 2 * tern_wire::tlv::RECORD_HEADER_LEN)
    }

    /// Drops calls and replies in parts not heard of for [`PART_TIMEOUT`] (looked at once a
    /// second).
    fn sweep(&mut self) {
        let now = Instant::now();
        if now.duration_since(self.last_sweep) < Duration::from_secs(1) {
            return;
        }
        self.last_sweep = now;
        let (mut freed, mut expired) = (0, 0);
        self.assembling.retain(|_, a| {
            let keep = now.duration_since(a.last) < PART_TIMEOUT;
            if !keep {
                freed += a.body.len() + HELD_ENTRY_BYTES;
                expired += 1;
            }
            keep
        });
        self.replies.retain(|_, h| {
            let keep = now.duration_since(h.last) < PART_TIMEOUT;
            if !keep {
                freed += h.body.len() + HELD_ENTRY_BYTES;
                expired += 1;
            }
            keep
        });
        self.held -= freed;
        self.parts.expired += expired;
    }

    /// Replies to a call (sent on the next `flush` or `recv`, or when a batch fills). A body
    /// longer than one reply carries goes in parts (the client fetches the rest); one over
    /// [`MAX_MESSAGE`] is refused (nothing sent), and one the server has no room to hold is
    /// answered `overloaded` in its place.
    pub fn reply(
        &mut self,
        handle: ReqHandle,
        request_id: u64,
        status: Status,
        error: &str,
        body: &[u8],
    ) -> Result<(), SegmentError> {
        let first = self.reply_capacity(error);
        if body.len() <= first {
            let reply =
                Reply { request_id, status: status.code(), flags: 0, error: error.to_string(), body: body.to_vec() };
            return self.qnp.send_resp(handle, &reply);
        }
        if body.len() > MAX_MESSAGE {
            let per_packet = self.cfg.payload_capacity().max(1);
            return Err(SegmentError::TooManyPackets {
                message: "Reply",
                packets: body.len().div_ceil(per_packet),
                max: MAX_MESSAGE.div_ceil(per_packet),
            });
        }
        if self.held + body.len() + HELD_ENTRY_BYTES > HELD_LIMIT {
            self.parts.over_budget += 1;
            let e = format!("the server holds {HELD_LIMIT} bytes of calls and replies in parts");
            self.answer(handle, request_id, Status::Overloaded, 0, &e, &[]);
            return Ok(());
        }
        let key = (handle.peer, request_id);
        if let Some(old) = self.replies.remove(&key) {
            self.held -= old.body.len() + HELD_ENTRY_BYTES;
        }
        self.parts.replies_in_parts += 1;
        self.held += body.len() + HELD_ENTRY_BYTES;
        self.replies
            .insert(key, HeldReply { status: status.code(), body: body.to_vec(), sent: first, last: Instant::now() });
        let reply = Reply {
            request_id,
            status: status.code(),
            flags: MORE,
            error: error.to_string(),
            body: body[..first].to_vec(),
        };
        self.qnp.send_resp(handle, &reply)
    }

    /// Sends everything queued.
    pub fn flush(&mut self) -> io::Result<()> {
        self.qnp.flush()
    }

    /// The QNP server (its counters: drops by reason, duplicates answered from memory).
    pub fn qnp(&self) -> &QnpServer<P> {
        &self.qnp
    }

    /// What it did with calls and replies in parts.
    pub fn part_stats(&self) -> PartStats {
        self.parts
    }

    /// Bytes it holds for calls and replies in parts (at most [`HELD_LIMIT`]).
    pub fn held_bytes(&self) -> usize {
        self.held
    }
}

/// A call the client cannot make.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The body is over [`MAX_MESSAGE`].
    #[error("a call body of {len} bytes: at most {MAX_MESSAGE}")]
    TooLarge {
        /// Its length.
        len: usize,
    },
    /// The header sets the endpoint's own flags ([`ENDPOINT_FLAGS`]).
    #[error("flags {0:#x} set the endpoint's own bits ({ENDPOINT_FLAGS:#x})")]
    ReservedFlags(u32),
    /// QNP refused the request (the window is full).
    #[error(transparent)]
    Req(#[from] ReqError),
}

/// A call in flight: its one QNP request now, what of its body is still to send, and what of
/// its reply has come.
#[derive(Debug)]
struct InFlight {
    header: Header,
    /// The whole body when it goes in parts (else empty), and how much of it is sent.
    body: Vec<u8>,
    sent: usize,
    /// The reply's parts so far, its status and error (from the first part).
    reply: Vec<u8>,
    status: u32,
    error: String,
    started: Instant,
}

/// A client thread's RPC endpoint.
#[derive(Debug)]
pub struct RpcClient<P> {
    qnp: QnpClient<P>,
    cfg: QnpConfig,
    /// Each call in flight, by its QNP request id now.
    outstanding: HashMap<u32, InFlight>,
    rx: Vec<Completion<Reply>>,
}

impl<P: Port> RpcClient<P> {
    /// A client of the RPC server at `server`, over `port`.
    pub fn new(port: P, pool: &Pool, cfg: QnpConfig, server: SocketAddr) -> RpcClient<P> {
        RpcClient {
            qnp: QnpClient::new(port, pool, cfg.clone(), APP_ID, server),
            cfg,
            outstanding: HashMap::new(),
            rx: Vec::new(),
        }
    }

    /// Calls `header.method` with `body` (queued until the batch fills or the next `flush` or
    /// `recv`). A body longer than one QNP request carries ([`max_body`]) goes in parts, each
    /// sent when the one before is acknowledged; up to [`MAX_MESSAGE`].
    pub fn call(&mut self, header: Header, body: &[u8]) -> Result<(), CallError> {
        if header.flags & ENDPOINT_FLAGS != 0 {
            return Err(CallError::ReservedFlags(header.flags));
        }
        if body.len() > MAX_MESSAGE {
            return Err(CallError::TooLarge { len: body.len() });
        }
        let part = max_body(&self.cfg);
        let mut f = InFlight {
            header,
            body: Vec::new(),
            sent: 0,
            reply: Vec::new(),
            status: 0,
            error: String::new(),
            started: Instant::now(),
        };
        let id = if body.len() <= part {
            self.send(&header, 0, body)?
        } else {
            let id = self.send(&header, MORE, &body[..part])?;
            f.body = body.to_vec();
            f.sent = part;
            id
        };
        self.outstanding.insert(id, f);
        Ok(())
    }

    fn send(&mut self, h: &Header, flags: u32, body: &[u8]) -> Result<u32, ReqError> {
        let call = Call {
            method: h.method,
            class_id: h.class_id,
            request_id: h.request_id,
            flags: h.flags | flags,
            body: body.to_vec(),
        };
        self.qnp.send_req(CALL, &call)
    }

    /// Sends everything queued.
    pub fn flush(&mut self) -> io::Result<()> {
        self.qnp.flush()
    }

    /// Calls sent and not yet answered or failed.
    pub fn outstanding(&self) -> usize {
        self.outstanding.len()
    }

    /// Appends replies (each once, a reply in parts once it is whole) and failed calls to
    /// `out`, waiting up to `timeout` for the first; how many were appended. Sends a call's
    /// next part, or asks for its reply's next part, as the one before comes back.
    pub fn recv(&mut self, out: &mut Vec<Result<Answer, Failed>>, timeout: Duration) -> io::Result<usize> {
        self.rx.clear();
        self.qnp.recv_resp::<Reply>(&mut self.rx, timeout)?;
        let before = out.len();
        let mut rx = std::mem::take(&mut self.rx);
        for c in rx.drain(..) {
            match c {
                Completion::Response { req_id, resp, .. } => {
                    // A reply for a call this client did not make (or made and already ended)
                    // is QNP's to drop.
                    let Some(f) = self.outstanding.remove(&req_id) else { continue };
                    if let Some(a) = self.advance(f, resp) {
                        out.push(Ok(a));
                    }
                }
                Completion::Failed { req_id, error } => {
                    let Some(f) = self.outstanding.remove(&req_id) else { continue };
                    out.push(Err(Failed { request_id: f.header.request_id, error }));
                }
            }
        }
        self.rx = rx;
        self.qnp.flush()?;
        Ok(out.len() - before)
    }

    /// A call's request answered: its next part sent, or its reply's next part asked for, or
    /// the call's answer.
    fn advance(&mut self, mut f: InFlight, resp: Reply) -> Option<Answer> {
        let request_id = f.header.request_id;
        let end = |f: &InFlight, status: Status, error: String, body: Vec<u8>| Answer {
            request_id,
            status,
            flags: resp.flags & !ENDPOINT_FLAGS,
            error,
            body,
            latency: f.started.elapsed(),
        };
        // One that names another request id is the server's error: no answer.
        if resp.request_id != request_id {
            let e = format!("the reply names request id {}, not this call's", resp.request_id);
            return Some(end(&f, Status::Internal, e, Vec::new()));
        }
        let status = Status::from_code(resp.status);
        if f.sent < f.body.len() {
            // A part of the call acknowledged: the next part; anything else ends the call.
            if status != Status::Ok || resp.flags & MORE == 0 {
                return Some(end(&f, status, resp.error, resp.body));
            }
            let to = (f.sent + max_body(&self.cfg)).min(f.body.len());
            let flags = if to < f.body.len() { MORE } else { 0 };
            let sent = self.send(&f.header, flags, &f.body[f.sent..to]);
            f.sent = to;
            if to == f.body.len() {
                // All sent: what comes back next is the reply.
                f.body = Vec::new();
                f.sent = 0;
            }
            return match sent {
                Ok(id) => {
                    self.outstanding.insert(id, f);
                    None
                }
                Err(e) => Some(end(&f, Status::Internal, format!("the call's next part: {e}"), Vec::new())),
            };
        }
        // The reply, or a part of it.
        if f.reply.is_empty() {
            f.status = resp.status;
            f.error = resp.error;
        }
        if f.reply.len() + resp.body.len() > MAX_MESSAGE {
            return Some(end(&f, Status::Internal, format!("a reply of more than {MAX_MESSAGE} bytes"), Vec::new()));
        }
        f.reply.extend_from_slice(&resp.body);
        if resp.flags & MORE != 0 {
            return match self.send(&f.header, NEXT, &[]) {
                Ok(id) => {
                    self.outstanding.insert(id, f);
                    None
                }
                Err(e) => Some(end(&f, Status::Internal, format!("the reply's next part: {e}"), Vec::new())),
            };
        }
        let (status, error, body) =
            (Status::from_code(f.status), std::mem::take(&mut f.error), std::mem::take(&mut f.reply));
        Some(end(&f, status, error, body))
    }

    /// The QNP client (its counters).
    pub fn qnp(&self) -> &QnpClient<P> {
        &self.qnp
    }
}
