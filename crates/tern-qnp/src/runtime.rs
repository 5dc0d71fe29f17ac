//! The application API of QingNiao (Figure 7): per thread, a typed `send_req` and a receive
//! call, over any port. One thread owns one endpoint and one port (the paper's shared-nothing
//! model: one core, one TX/RX queue pair). A server thread's port can be a UDP socket bound with
//! `SO_REUSEPORT` (kernel RSS), or a ring fed by a dispatcher core.

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tern_io::{Batch, DEFAULT_BATCH, Pool, Port};
use tern_wire::tlv::{DecodeError, Message};

use crate::{Client, ClientEvent, DropReason, ExactlyOnce, QnpConfig, ReqError, ReqHandle, SegmentError, Server};

/// The outcome of a request, reported once.
#[derive(Debug, Clone, PartialEq)]
pub enum Completion<R> {
    /// The response arrived.
    Response {
        /// Request id.
        req_id: u32,
        /// The decoded response.
        resp: R,
        /// Time from `send_req` to the response.
        latency: Duration,
    },
    /// The request failed for good.
    Failed {
        /// Request id.
        req_id: u32,
        /// Why.
        error: CompletionError,
    },
}

/// Why a request completed without a usable response.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CompletionError {
    /// The transport gave up.
    #[error(transparent)]
    Transport(#[from] ReqError),
    /// The response did not decode.
    #[error("response did not decode: {0}")]
    Decode(#[from] DecodeError),
}

/// A request received by a server, with the handle to answer it.
#[derive(Debug, Clone, PartialEq)]
pub struct Request<M> {
    /// Pass to `send_resp`.
    pub handle: ReqHandle,
    /// The decoded request.
    pub req: M,
}

/// A hard-to-guess first request id, so a restarted client does not reuse recent ids.
fn first_id() -> u32 {
    use rand::{Rng, SeedableRng};
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let seed = nanos
        ^ (u64::from(std::process::id()) << 32)
        ^ COUNTER.fetch_add(1, Ordering::Relaxed).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    rand::rngs::SmallRng::seed_from_u64(seed).random()
}

/// Waits for the port until the caller's deadline (`start + timeout`), the core's next timer or
/// the port's own next event, whichever comes first; returns false once the deadline has passed.
fn park<P: Port>(
    port: &mut P,
    core_timer: Option<Instant>,
    start: Instant,
    now: Instant,
    timeout: Duration,
) -> io::Result<bool> {
    let elapsed = now.saturating_duration_since(start);
    if elapsed >= timeout {
        return Ok(false);
    }
    let mut wait = timeout - elapsed;
    for t in [core_timer, port.poll_at()].into_iter().flatten() {
        wait = wait.min(t.saturating_duration_since(now));
    }
    port.wait(wait)?;
    Ok(true)
}

/// Batches a client reads before it runs its retransmission timers.
const MAX_RX_BATCHES: usize = 64;

/// A client thread's endpoint.
#[derive(Debug)]
pub struct QnpClient<P> {
    core: Client,
    port: P,
    pool: Pool,
    rx: Batch,
    tx: Batch,
}

impl<P: Port> QnpClient<P> {
    /// A client of application `app_id` at `server`, over `port`.
    pub fn new(port: P, pool: &Pool, cfg: QnpConfig, app_id: u8, server: SocketAddr) -> Self {
        QnpClient {
            core: Client::new(cfg, app_id, server, first_id()),
            port,
            pool: pool.clone(),
            rx: Batch::new(DEFAULT_BATCH),
            tx: Batch::new(DEFAULT_BATCH),
        }
    }

    /// Sends a request (queued until the batch fills or the next `flush`/`recv_resp`).
    pub fn send_req<M: Message>(&mut self, req_type: u8, req: &M) -> Result<u32, ReqError> {
        let id = self.core.send_req(Instant::now(), req_type, req)?;
        Ok(id)
    }

    /// Sends everything queued.
    pub fn flush(&mut self) -> io::Result<()> {
        while self.core.has_transmit() {
            self.core.poll_transmit(&self.pool, &mut self.tx);
            self.port.send(Instant::now(), &mut self.tx)?;
        }
        if self.port.poll_at().is_some_and(|t| t <= Instant::now()) {
            self.port.send(Instant::now(), &mut self.tx)?;
        }
        Ok(())
    }

    /// Appends completed requests to `out`, waiting up to `timeout` for the first; returns how
    /// many were appended. Also sends queued requests and runs retransmission timers.
    pub fn recv_resp<R: Message>(&mut self, out: &mut Vec<Completion<R>>, timeout: Duration) -> io::Result<usize> {
        let start = Instant::now();
        let before = out.len();
        loop {
            self.flush()?;
            let now = Instant::now();
            // Read everything that has arrived before running the timers: a response waiting
            // in the socket behind a full batch must not count as late (after the process was
            // descheduled, many do). Bounded, so a flood cannot starve the timers.
            for _ in 0..MAX_RX_BATCHES {
                if self.port.recv(now, &mut self.rx)? == 0 {
                    break;
                }
                for p in self.rx.drain() {
                    if let Some(r) = self.core.handle_packet(now, p.peer(), p.data()) {
                        let (req_id, latency) = (r.req_id, now.saturating_duration_since(r.sent_at));
                        match R::decode_parts(r.parts.iter()) {
                            Ok(resp) => out.push(Completion::Response { req_id, resp, latency }),
                            Err(e) => {
                                self.core.count_drop(DropReason::DecodeError);
                                out.push(Completion::Failed { req_id, error: e.into() });
                            }
                        }
                    }
                    self.pool.put(p);
                }
            }
            self.core.handle_timeout(now);
            while let Some(ClientEvent::Failed { req_id, error }) = self.core.poll_event() {
                out.push(Completion::Failed { req_id, error: error.into() });
            }
            if out.len() > before {
                self.flush()?;
                return Ok(out.len() - before);
            }
            if !park(&mut self.port, self.core.poll_timeout(), start, now, timeout)? {
                return Ok(0);
            }
        }
    }

    /// The protocol core (counters, RTO).
    pub fn core(&self) -> &Client {
        &self.core
    }
    /// The port.
    pub fn port(&self) -> &P {
        &self.port
    }
}

/// A server thread's endpoint.
#[derive(Debug)]
pub struct QnpServer<P> {
    core: Server,
    port: P,
    pool: Pool,
    rx: Batch,
    tx: Batch,
}

impl<P: Port> QnpServer<P> {
    /// A server of the given application ids over `port`.
    pub fn new(port: P, pool: &Pool, cfg: QnpConfig, apps: &[u8]) -> Self {
        let memory = Arc::new(ExactlyOnce::new(&cfg, 1));
        QnpServer::with_memory(port, pool, cfg, apps, memory)
    }

    /// A server that shares its exactly-once memory with the other workers of one service (see
    /// [`Server::with_memory`]).
    pub fn with_memory(port: P, pool: &Pool, cfg: QnpConfig, apps: &[u8], memory: Arc<ExactlyOnce>) -> Self {
        QnpServer {
            core: Server::with_memory(cfg, apps, Instant::now(), memory),
            port,
            pool: pool.clone(),
            rx: Batch::new(DEFAULT_BATCH),
            tx: Batch::new(DEFAULT_BATCH),
        }
    }

    /// Declares a request type this server answers and its dispatch fields (see
    /// [`Server::declare_request_type`]).
    pub fn declare_request_type(&mut self, app_id: u8, req_type: u8, dispatch_fields: &[u8]) {
        self.core.declare_request_type(app_id, req_type, dispatch_fields);
    }

    /// Appends received requests to `out`, each delivered once, waiting up to `timeout` for
    /// the first; returns how many were appended. Sends queued responses first.
    pub fn recv_req<M: Message>(&mut self, out: &mut Vec<Request<M>>, timeout: Duration) -> io::Result<usize> {
        let start = Instant::now();
        let before = out.len();
        loop {
            self.flush()?;
            let now = Instant::now();
            self.port.recv(now, &mut self.rx)?;
            for p in self.rx.drain() {
                if let Some(inc) = self.core.handle_packet(now, p.peer(), p.data()) {
                    let handle = inc.handle;
                    match M::decode_parts(inc.parts.iter()) {
                        Ok(req) => out.push(Request { handle, req }),
                        Err(_) => self.core.count_drop(DropReason::DecodeError),
                    }
                }
                self.pool.put(p);
            }
            self.core.handle_timeout(now);
            // Duplicates may have queued resends of cached responses.
            self.flush()?;
            if out.len() > before {
                return Ok(out.len() - before);
            }
            if !park(&mut self.port, self.core.poll_timeout(), start, now, timeout)? {
                return Ok(0);
            }
        }
    }

    /// Answers a request; the response carries its ACK. Sent when a batch fills, on `flush`,
    /// or on the next `recv_req`.
    pub fn send_resp<M: Message>(&mut self, handle: ReqHandle, resp: &M) -> Result<(), SegmentError> {
        self.core.respond(handle, resp)?;
        if self.core.has_transmit() {
            self.core.poll_transmit(&self.pool, &mut self.tx);
            if self.tx.is_full() {
                // A failed send is counted by the port; the client retransmits.
                let _ = self.port.send(Instant::now(), &mut self.tx);
            }
        }
        Ok(())
    }

    /// Sends everything queued.
    pub fn flush(&mut self) -> io::Result<()> {
        loop {
            self.core.poll_transmit(&self.pool, &mut self.tx);
            if self.tx.is_empty() && self.port.poll_at().is_none_or(|t| t > Instant::now()) {
                return Ok(());
            }
            self.port.send(Instant::now(), &mut self.tx)?;
            if !self.core.has_transmit() {
                return Ok(());
            }
        }
    }

    /// The protocol core (counters, table).
    pub fn core(&self) -> &Server {
        &self.core
    }
    /// The port.
    pub fn port(&self) -> &P {
        &self.port
    }
}
