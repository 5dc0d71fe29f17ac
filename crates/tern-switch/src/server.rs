//! A server of the group (CLIP §III-C; docs/clip.md, "Servers"), sans I/O: it takes request
//! frames from the switch, runs the program's remote handler on each and answers in place —
//! the header's `kind` turned into a response, its parameters rewritten, its `BUSY` flag set
//! while the server is near its queue limit — and keeps the list of its live flows that the
//! controller takes before a membership change.
//!
//! A frame that is not a request of the server's program is dropped by name
//! ([`ServerDrop`]); a handler's refusal is a drop too. No frame is answered twice: each
//! request frame becomes exactly one response or one drop.

use hashbrown::HashMap;
use tern_io::{Batch, Pool};
use tern_wire::clip::{self, Header, Kind};

use crate::group::FlowId;

/// A program's remote handler: the code a switch cannot run (§III-C).
pub trait RemoteHandler: Send {
    /// Its name, as programs name it (`handler = "..."`).
    fn name(&self) -> &'static str;
    /// Handles one request: `flow` its flow's id, `l3` the original frame from its byte 14
    /// (the bytes after its EtherType), `request` the request's parameters; writes the
    /// response's parameters into `response` (the header's parameter bytes: the program's
    /// response fields first). `Err` drops it, naming why.
    fn handle(&mut self, flow: FlowId, l3: &[u8], request: &[u8], response: &mut [u8]) -> Result<(), &'static str>;
    /// Entries the handler holds (its mirrored table).
    fn entries(&self) -> usize;
    /// Moves the entries it made since the last call into `out`, each a record for
    /// [`adopt_replica`](Self::adopt_replica) on its buddy (replication for failover).
    fn take_new(&mut self, out: &mut Vec<Vec<u8>>) {
        let _ = out;
    }
    /// Takes a replica of another server's entry (a record from its `take_new`); a record it
    /// cannot read is refused, naming why.
    fn adopt_replica(&mut self, record: &[u8]) -> Result<(), &'static str> {
        let _ = record;
        Err("no replicas")
    }
    /// Up to `max` of its entries, each as (key, value) in words (for `dump-tables`).
    fn dump(&self, max: usize) -> Vec<(String, String)> {
        let _ = max;
        Vec::new()
    }
}

/// Why a server dropped a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ServerDrop {
    /// Not a CLIP frame, or a header error.
    NotClip,
    /// A response, not a request.
    NotRequest,
    /// Another program's request.
    UnknownProgram,
    /// The handler refused it.
    Handler,
}

impl ServerDrop {
    pub const ALL: [ServerDrop; 4] =
        [ServerDrop::NotClip, ServerDrop::NotRequest, ServerDrop::UnknownProgram, ServerDrop::Handler];

    /// Its name in metrics.
    pub fn name(self) -> &'static str {
        match self {
            ServerDrop::NotClip => "not_clip",
            ServerDrop::NotRequest => "not_request",
            ServerDrop::UnknownProgram => "unknown_program",
            ServerDrop::Handler => "handler",
        }
    }
}

/// A server's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerStats {
    pub requests: u64,
    pub responses: u64,
    /// Responses sent with `BUSY` set.
    pub busy_responses: u64,
    pub drops: [u64; 4],
}

/// A server: its handler and its live flows.
pub struct Server {
    ethertype: u16,
    program: u16,
    handler: Box<dyn RemoteHandler>,
    /// Live flows: last packet's time (ns).
    live: HashMap<FlowId, u64>,
    idle_ns: u64,
    stats: ServerStats,
    kept: Vec<tern_io::Packet>,
    /// What a request's trip through the server costs beyond the handler, ns (spent on each;
    /// models a server path's receive and send in benchmarks; 0: none).
    pub path_ns: u64,
    /// Whether it collects its handler's new entries for a buddy ([`take_replicas`]).
    ///
    /// [`take_replicas`]: Self::take_replicas
    pub replicate: bool,
    replicas: Vec<Vec<u8>>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("program", &self.program)
            .field("handler", &self.handler.name())
            .field("live", &self.live.len())
            .finish()
    }
}

impl Server {
    /// A server of `program` running `handler`; a flow is live until `idle_ns` pass without its
    /// packets.
    pub fn new(ethertype: u16, program: u16, handler: Box<dyn RemoteHandler>, idle_ns: u64) -> Server {
        Server {
            ethertype,
            program,
            handler,
            live: HashMap::new(),
            idle_ns,
            path_ns: 0,
            replicate: false,
            replicas: Vec::new(),
            stats: ServerStats::default(),
            kept: Vec::new(),
        }
    }

    /// Answers every request of `batch` in place, at `now_ns`; `busy` sets the responses'
    /// `BUSY` flag. Dropped frames go back to `pool`; the answered stay in `batch`.
    pub fn process(&mut self, now_ns: u64, batch: &mut Batch, busy: bool, pool: &Pool) {
        let mut kept = std::mem::take(&mut self.kept);
        for mut p in batch.drain() {
            match self.answer(now_ns, p.data_mut(), busy) {
                Ok(()) => kept.push(p),
                Err(d) => {
                    self.stats.drops[ServerDrop::ALL.iter().position(|&x| x == d).unwrap_or(0)] += 1;
                    pool.put(p);
                }
            }
        }
        // The answered go back in the batch, whose emptied vector becomes the next scratch.
        batch.exchange(&mut kept);
        self.kept = kept;
        if self.replicate {
            self.handler.take_new(&mut self.replicas);
        }
    }

    /// The records of the entries its handler made since the last call, for its buddy: the
    /// runtime hands them over before it sends the batch's responses (so a failover finds
    /// every entry a response has told of).
    pub fn take_replicas(&mut self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.replicas)
    }

    /// Takes another server's replicas; returns how many were refused.
    pub fn adopt_replicas(&mut self, records: &[Vec<u8>]) -> usize {
        records.iter().filter(|r| self.handler.adopt_replica(r).is_err()).count()
    }

    /// Answers one request frame in place.
    pub fn answer(&mut self, now_ns: u64, f: &mut [u8], busy: bool) -> Result<(), ServerDrop> {
        let (repr, _) = clip::peek(f, self.ethertype).map_err(|_| ServerDrop::NotClip)?;
        if repr.kind != Kind::Request {
            return Err(ServerDrop::NotRequest);
        }
        if repr.program != self.program {
            return Err(ServerDrop::UnknownProgram);
        }
        self.stats.requests += 1;
        let hl = repr.header_len();
        let (head, l3) = f.split_at_mut(clip::ETH_LEN + hl);
        let flow = crate::flow::flow_id_l3(l3).unwrap_or(0);
        let mut h = Header::new_unchecked(&mut head[clip::ETH_LEN..]);
        let mut request = [0u8; 255];
        let plen = usize::from(repr.param_len);
        request[..plen].copy_from_slice(h.params());
        self.handler.handle(flow, l3, &request[..plen], h.params_mut()).map_err(|_| ServerDrop::Handler)?;
        h.set_kind(Kind::Response);
        h.set_flags(if busy { clip::FLAG_BUSY } else { 0 });
        if self.path_ns > 0 {
            tern_io::spin_for(std::time::Duration::from_nanos(self.path_ns));
        }
        self.live.insert(flow, now_ns);
        self.stats.responses += 1;
        self.stats.busy_responses += u64::from(busy);
        Ok(())
    }

    /// Forgets flows idle for the idle time; returns them (ended flows, for the switch's pins).
    pub fn expire(&mut self, now_ns: u64) -> Vec<FlowId> {
        let idle = self.idle_ns;
        let mut ended = Vec::new();
        self.live.retain(|&f, &mut t| {
            let live = now_ns.saturating_sub(t) < idle;
            if !live {
                ended.push(f);
            }
            live
        });
        ended
    }

    /// Its live flows.
    pub fn live_flows(&self) -> impl Iterator<Item = FlowId> + '_ {
        self.live.keys().copied()
    }

    /// Whether it has live flows.
    pub fn is_idle(&self) -> bool {
        self.live.is_empty()
    }

    /// Counters.
    pub fn stats(&self) -> ServerStats {
        self.stats
    }

    /// The handler.
    pub fn handler(&self) -> &dyn RemoteHandler {
        self.handler.as_ref()
    }
}

/// CLIP's SNAT (Appendix A) as a remote handler: the server's mirror of the switch's `nat`
/// table maps a flow's 5-tuple to its public address and port; a flow without one gets the
/// next free pair (addresses of a pool, ports of a range), which it keeps. The response: the
/// address (4 bytes) and port (2), big-endian — the program's `res.addr` and `res.port`.
#[derive(Debug, Clone)]
pub struct Snat {
    addrs: Vec<u32>,
    ports: (u16, u16),
    table: HashMap<[u64; 5], (u32, u16)>,
    next: u64,
    /// Entries made since the last `take_new`.
    fresh: Vec<[u64; 5]>,
}

impl Snat {
    /// A SNAT over public `addrs` and ports `ports.0..=ports.1`.
    pub fn new(addrs: Vec<u32>, ports: (u16, u16)) -> Result<Snat, String> {
        if addrs.is_empty() || ports.0 > ports.1 {
            return Err("snat: at least one address and a port range low to high".into());
        }
        Ok(Snat { addrs, ports, table: HashMap::new(), next: 0, fresh: Vec::new() })
    }

    /// Pairs it can hand out.
    pub fn capacity(&self) -> u64 {
        self.addrs.len() as u64 * (u64::from(self.ports.1 - self.ports.0) + 1)
    }

    /// The pair a flow holds.
    pub fn get(&self, tuple: &[u64; 5]) -> Option<(u32, u16)> {
        self.table.get(tuple).copied()
    }

    /// Takes over another server's entries (failover replicas): flows it does not hold.
    pub fn adopt(&mut self, entries: impl IntoIterator<Item = ([u64; 5], (u32, u16))>) {
        for (k, v) in entries {
            self.table.entry(k).or_insert(v);
        }
    }

    /// Its entries.
    pub fn iter(&self) -> impl Iterator<Item = (&[u64; 5], &(u32, u16))> {
        self.table.iter()
    }
}

impl RemoteHandler for Snat {
    fn name(&self) -> &'static str {
        "snat"
    }

    fn handle(&mut self, _flow: FlowId, l3: &[u8], _request: &[u8], response: &mut [u8]) -> Result<(), &'static str> {
        let tuple = crate::flow::five_tuple_l3(l3).ok_or("not_ipv4")?;
        let (addr, port) = match self.table.get(&tuple) {
            Some(&v) => v,
            None => {
                if self.next >= self.capacity() {
                    return Err("exhausted");
                }
                let span = u64::from(self.ports.1 - self.ports.0) + 1;
                let v = (self.addrs[(self.next / span) as usize], self.ports.0 + (self.next % span) as u16);
                self.next += 1;
                self.table.insert(tuple, v);
                self.fresh.push(tuple);
                v
            }
        };
        if response.len() < 6 {
            return Err("response_length");
        }
        response[..4].copy_from_slice(&addr.to_be_bytes());
        response[4..6].copy_from_slice(&port.to_be_bytes());
        response[6..].fill(0);
        Ok(())
    }

    fn entries(&self) -> usize {
        self.table.len()
    }

    /// A record: the 5-tuple (five 8-byte words), the address (4 bytes) and port (2), big-endian.
    fn take_new(&mut self, out: &mut Vec<Vec<u8>>) {
        for k in self.fresh.drain(..) {
            if let Some(&(a, p)) = self.table.get(&k) {
                let mut r = Vec::with_capacity(46);
                for w in k {
                    r.extend_from_slice(&w.to_be_bytes());
                }
                r.extend_from_slice(&a.to_be_bytes());
                r.extend_from_slice(&p.to_be_bytes());
                out.push(r);
            }
        }
    }

    fn adopt_replica(&mut self, r: &[u8]) -> Result<(), &'static str> {
        if r.len() != 46 {
            return Err("record_length");
        }
        let mut k = [0u64; 5];
        for (i, w) in k.iter_mut().enumerate() {
            *w = u64::from_be_bytes(r[8 * i..8 * i + 8].try_into().map_err(|_| "record_length")?);
        }
        let a = u32::from_be_bytes(r[40..44].try_into().map_err(|_| "record_length")?);
        let p = u16::from_be_bytes([r[44], r[45]]);
        self.table.entry(k).or_insert((a, p));
        Ok(())
    }

    fn dump(&self, max: usize) -> Vec<(String, String)> {
        let ip = |v: u64| std::net::Ipv4Addr::from(v as u32);
        let proto = |p: u64| match p {
            6 => "tcp".to_string(),
            17 => "udp".to_string(),
            p => p.to_string(),
        };
        self.table
            .iter()
            .take(max)
            .map(|(k, &(a, p))| {
                (
                    format!("{} {}:{} -> {}:{}", proto(k[2]), ip(k[0]), k[3], ip(k[1]), k[4]),
                    format!("{}:{p}", std::net::Ipv4Addr::from(a)),
                )
            })
            .collect()
    }
}

/// A switch and its servers in one thread, frames handed between them directly (tests, the
/// demo, `tern switch trace`): each frame a host sends runs through the switch, through a
/// server if it needs one and back, until it leaves by a host port or is dropped.
#[derive(Debug)]
pub struct Cluster {
    pub switch: crate::switch::Switch,
    /// Server `s` of the switch's configuration.
    pub servers: Vec<Server>,
    /// Servers marked busy (their responses carry `BUSY`).
    pub busy: Vec<bool>,
    /// Servers running (a dead one drops what reaches it, counted in `lost`).
    pub alive: Vec<bool>,
    /// Each server's buddy: it takes the server's replicas before the server's responses go
    /// on, and its flows if it fails.
    pub buddy: Vec<Option<usize>>,
    /// Frames sent to a dead server.
    pub lost: u64,
    /// Servers failed over so far.
    pub failed_over: Vec<(crate::group::ServerId, crate::group::ServerId)>,
    heartbeats: crate::group::Heartbeats,
    pool: Pool,
    outs: Vec<Batch>,
    input: Batch,
    /// A server's batch while it is answered.
    spare: Batch,
    /// The clock servers see, ns.
    pub now_ns: u64,
}

impl Cluster {
    /// `switch` with `servers` behind its server ports, in order.
    pub fn new(switch: crate::switch::Switch, servers: Vec<Server>) -> Cluster {
        let ports = usize::from(switch.config().ports) + 1;
        let n = servers.len();
        let mut heartbeats = crate::group::Heartbeats::new(crate::group::DEFAULT_HEARTBEAT_BOUND_NS);
        for s in 0..n {
            heartbeats.beat(s as u16, 0);
        }
        Cluster {
            switch,
            servers,
            busy: vec![false; n],
            alive: vec![true; n],
            buddy: vec![None; n],
            lost: 0,
            failed_over: Vec::new(),
            heartbeats,
            pool: Pool::new(4096, 2048),
            outs: (0..ports).map(|_| Batch::new(256)).collect(),
            input: Batch::new(256),
            spare: Batch::new(256),
            now_ns: 0,
        }
    }

    /// Sends `frames` in on host port `port` (at most 256 a call); returns what left by host
    /// ports, with the port, in order.
    pub fn send(&mut self, port: u16, frames: &[&[u8]]) -> Vec<(u16, Vec<u8>)> {
        for f in frames.iter().take(256) {
            let mut p = self.pool.packet();
            p.reserve_headroom(tern_io::DEFAULT_HEADROOM);
            if p.extend_from_slice(f).is_err() {
                self.pool.put(p);
                continue;
            }
            let _ = self.input.push(p);
        }
        self.switch.process(port, &mut self.input, &mut self.outs, &self.pool);
        let mut left = Vec::new();
        // Servers answer, the switch takes the responses, until nothing is at a server.
        loop {
            let mut moved = false;
            for s in 0..self.servers.len() {
                let sp = self.switch.config().servers[s];
                if self.outs[usize::from(sp)].is_empty() {
                    continue;
                }
                // The server's batch changes places with the spare, which comes back empty.
                std::mem::swap(&mut self.outs[usize::from(sp)], &mut self.spare);
                let b = &mut self.spare;
                moved = true;
                if !self.alive[s] {
                    self.lost += b.len() as u64;
                    b.recycle(&self.pool);
                    continue;
                }
                let srv = &mut self.servers[s];
                srv.replicate = self.buddy[s].is_some();
                srv.process(self.now_ns, b, self.busy[s], &self.pool);
                // Replicas reach the buddy before the responses go on.
                let replicas = srv.take_replicas();
                if let Some(d) = self.buddy[s]
                    && self.alive.get(d) == Some(&true)
                {
                    self.servers[d].adopt_replicas(&replicas);
                }
                self.switch.process(sp, b, &mut self.outs, &self.pool);
            }
            self.switch.tick(self.now_ns, &mut self.outs);
            if !moved && self.switch.config().servers.iter().all(|&sp| self.outs[usize::from(sp)].is_empty()) {
                break;
            }
        }
        for (port, b) in self.outs.iter_mut().enumerate() {
            for p in b.drain() {
                left.push((port as u16, p.data().to_vec()));
                self.pool.put(p);
            }
        }
        left
    }

    /// Heartbeats at the cluster's clock: every live server beats; a member silent for the
    /// bound (300 ms) is failed over to its buddy (which holds its replicas). Returns the
    /// servers failed over now.
    pub fn heartbeats(&mut self) -> Vec<crate::group::ServerId> {
        for (s, &a) in self.alive.iter().enumerate() {
            if a {
                self.heartbeats.beat(s as u16, self.now_ns);
            }
        }
        let mut out = Vec::new();
        for dead in self.heartbeats.dead(self.now_ns) {
            let Some(buddy) = self.buddy[usize::from(dead)] else { continue };
            if self.switch.fail_over(dead, buddy as u16).is_ok() {
                self.heartbeats.forget(dead);
                self.failed_over.push((dead, buddy as u16));
                out.push(dead);
            }
        }
        out
    }

    /// The servers' live flows, ⟨flow, server⟩ (what the controller takes before a change).
    pub fn live_flows(&self) -> Vec<(FlowId, crate::group::ServerId)> {
        self.servers.iter().enumerate().flat_map(|(s, v)| v.live_flows().map(move |f| (f, s as u16))).collect()
    }
}

/// The remote handlers Tern has, by the name programs give (`handler = "..."`): server `index`
/// of a group gets its own (SNAT: addresses 192.0.2.`index+1`, ports 1024–65535).
pub fn handler(name: &str, index: u16) -> Result<Box<dyn RemoteHandler>, String> {
    match name {
        "snat" => {
            let last = u8::try_from(index + 1).map_err(|_| format!("snat: server {index}: at most 254 servers"))?;
            Ok(Box::new(Snat::new(vec![u32::from(std::net::Ipv4Addr::new(192, 0, 2, last))], (1024, 65535))?))
        }
        other => Err(format!("no remote handler `{other}` (Tern has: snat)")),
    }
}
