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

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

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

/// The RPC header of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Header {
    /// The method called.
    pub method: u32,
    /// The request message's class id in the service's schema table.
    pub class_id: u32,
    /// The caller's id for the call (echoed in the reply).
    pub request_id: u64,
    /// Flags (none defined yet: sent as given, 0 by convention).
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

/// The most body bytes a call or reply may carry under `cfg`: its packets per request times
/// each packet's payload, less the TLV records' headers and the other fields (QNP's header
/// counts packets in one byte, so at most 255 packets).
pub fn max_body(cfg: &QnpConfig) -> usize {
    let per_packet = cfg.payload_capacity().saturating_sub(tern_wire::tlv::RECORD_HEADER_LEN);
    // The other fields: at most 4 records of up to 8 bytes in the first packet.
    (usize::from(cfg.max_pkts_per_request) * per_packet).saturating_sub(4 * (tern_wire::tlv::RECORD_HEADER_LEN + 8))
}

/// A server thread's RPC endpoint.
#[derive(Debug)]
pub struct RpcServer<P> {
    qnp: QnpServer<P>,
    rx: Vec<tern_qnp::runtime::Request<Call>>,
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
        let mut qnp = QnpServer::with_memory(port, pool, cfg, &[APP_ID], memory);
        qnp.declare_request_type(APP_ID, CALL, &[1]);
        RpcServer { qnp, rx: Vec::new() }
    }

    /// Appends calls received (each once) to `out`, waiting up to `timeout` for the first;
    /// how many were appended.
    pub fn recv(&mut self, out: &mut Vec<Incoming>, timeout: Duration) -> io::Result<usize> {
        self.rx.clear();
        let n = self.qnp.recv_req::<Call>(&mut self.rx, timeout)?;
        out.extend(self.rx.drain(..).map(|r| Incoming {
            handle: r.handle,
            header: Header {
                method: r.req.method,
                class_id: r.req.class_id,
                request_id: r.req.request_id,
                flags: r.req.flags,
            },
            body: r.req.body,
        }));
        Ok(n)
    }

    /// Replies to a call (sent on the next `flush` or `recv`, or when a batch fills).
    pub fn reply(
        &mut self,
        handle: ReqHandle,
        request_id: u64,
        status: Status,
        error: &str,
        body: &[u8],
    ) -> Result<(), SegmentError> {
        let reply =
            Reply { request_id, status: status.code(), flags: 0, error: error.to_string(), body: body.to_vec() };
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
}

/// A client thread's RPC endpoint.
#[derive(Debug)]
pub struct RpcClient<P> {
    qnp: QnpClient<P>,
    /// The request id of each outstanding call, by its QNP request id.
    outstanding: std::collections::HashMap<u32, u64>,
    rx: Vec<Completion<Reply>>,
}

impl<P: Port> RpcClient<P> {
    /// A client of the RPC server at `server`, over `port`.
    pub fn new(port: P, pool: &Pool, cfg: QnpConfig, server: SocketAddr) -> RpcClient<P> {
        RpcClient {
            qnp: QnpClient::new(port, pool, cfg, APP_ID, server),
            outstanding: Default::default(),
            rx: Vec::new(),
        }
    }

    /// Calls `header.method` with `body` (queued until the batch fills or the next `flush` or
    /// `recv`).
    pub fn call(&mut self, header: Header, body: &[u8]) -> Result<(), ReqError> {
        let call = Call {
            method: header.method,
            class_id: header.class_id,
            request_id: header.request_id,
            flags: header.flags,
            body: body.to_vec(),
        };
        let id = self.qnp.send_req(CALL, &call)?;
        self.outstanding.insert(id, header.request_id);
        Ok(())
    }

    /// Sends everything queued.
    pub fn flush(&mut self) -> io::Result<()> {
        self.qnp.flush()
    }

    /// Calls sent and not yet answered or failed.
    pub fn outstanding(&self) -> usize {
        self.outstanding.len()
    }

    /// Appends replies (each once) and failed calls to `out`, waiting up to `timeout` for the
    /// first; how many were appended.
    pub fn recv(&mut self, out: &mut Vec<Result<Answer, Failed>>, timeout: Duration) -> io::Result<usize> {
        self.rx.clear();
        self.qnp.recv_resp::<Reply>(&mut self.rx, timeout)?;
        let before = out.len();
        for c in self.rx.drain(..) {
            match c {
                Completion::Response { req_id, resp, latency } => {
                    // A reply for a call this client did not make (or made and already ended)
                    // is QNP's to drop.
                    let Some(request_id) = self.outstanding.remove(&req_id) else { continue };
                    // One that names another request id is the server's error: no answer.
                    let (status, error, body) = if resp.request_id == request_id {
                        (Status::from_code(resp.status), resp.error, resp.body)
                    } else {
                        let e = format!("the reply names request id {}, not this call's", resp.request_id);
                        (Status::Internal, e, Vec::new())
                    };
                    out.push(Ok(Answer { request_id, status, flags: resp.flags, error, body, latency }));
                }
                Completion::Failed { req_id, error } => {
                    let Some(request_id) = self.outstanding.remove(&req_id) else { continue };
                    out.push(Err(Failed { request_id, error }));
                }
            }
        }
        Ok(out.len() - before)
    }

    /// The QNP client (its counters).
    pub fn qnp(&self) -> &QnpClient<P> {
        &self.qnp
    }
}
