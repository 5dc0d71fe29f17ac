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
use crate::nat::{self, Connection, Dir, Nat, NatConfig, NatDrop, Parsed, TcpState, Tuple};

/// A program's remote handler: the code a switch cannot run (§III-C).
pub trait RemoteHandler: Send {
    /// Its name, as programs name it (`handler = "..."`).
    fn name(&self) -> &'static str;
    /// Handles one request at `now_ns`: `flow` its flow's id, `l3` the original frame from its
    /// byte 14 (the bytes after its EtherType; a handler may rewrite them in place, as SNAT
    /// does an ICMP error's quoted packet), `request` the request's parameters; writes the
    /// response's parameters into `response` (the header's parameter bytes: the program's
    /// response fields first). `Err` drops it, naming why.
    fn handle(
        &mut self,
        now_ns: u64,
        flow: FlowId,
        l3: &mut [u8],
        request: &[u8],
        response: &mut [u8],
    ) -> Result<(), &'static str>;
    /// Entries the handler holds (its mirrored table).
    fn entries(&self) -> usize;
    /// Moves the entries it made since the last call into `out`, each a record for
    /// [`adopt_replica`](Self::adopt_replica) on its buddy (replication for failover).
    fn take_new(&mut self, out: &mut Vec<Vec<u8>>) {
        let _ = out;
    }
    /// Takes a replica of another server's entry (a record from its `take_new`) at `now_ns`; a
    /// record it cannot read is refused, naming why.
    fn adopt_replica(&mut self, now_ns: u64, record: &[u8]) -> Result<(), &'static str> {
        let _ = (now_ns, record);
        Err("no replicas")
    }
    /// Records (as [`take_new`](Self::take_new)'s) of the entries it holds that another
    /// server made (adopted here in a failover: another's public pair, another's register):
    /// what that server, come back, takes back so that it gives out none of what they hold.
    /// None by default.
    fn hand_back(&mut self, out: &mut Vec<Vec<u8>>) {
        let _ = out;
    }
    /// Takes back at `now_ns` what its buddy handed back (all of it, each time it asks): of the
    /// records, those of its own entries (its public pairs, its registers) are adopted — an
    /// entry held already is kept, its timeout restarted — the others skipped; and what it took
    /// back before but is handed back no more (closed at the buddy) is let go. Returns how many
    /// of its own records were refused. Takes nothing by default.
    fn take_back(&mut self, now_ns: u64, records: &[Vec<u8>]) -> usize {
        let _ = (now_ns, records);
        0
    }
    /// Entries it holds because its buddy handed them back at the last `take_back` (while
    /// there are some, the runtime asks again).
    fn taken_back(&self) -> usize {
        0
    }
    /// Records (as [`take_new`](Self::take_new)'s) of every entry it made itself and holds
    /// live at `now_ns`: what a buddy that restarted (and so lost its replicas) is sent again.
    /// None by default.
    fn own_records(&mut self, now_ns: u64, out: &mut Vec<Vec<u8>>) {
        let _ = (now_ns, out);
    }
    /// The flows of every entry it holds live at `now_ns`, each with until when its state lives (None: the
    /// server's idle time from now): when a failover makes this server serve another's flows
    /// ([`Server::take_over`]) they are its live flows, so that a group change keeps them here
    /// before their next packet (a flow another live server also lists stays with the one its
    /// packets reach). None by default.
    fn held_flows(&mut self, now_ns: u64, out: &mut Vec<(FlowId, Option<u64>)>) {
        let _ = (now_ns, out);
    }
    /// Until when (ns, on `handle`'s clock) the state the last `handle` touched lives, if the
    /// handler keeps state a flow's packets must keep finding (SNAT: the connection, until its
    /// timeout). The server keeps the flow live until then, however long it is idle, so that a
    /// group change keeps it on this server (pinned). None by default: live for the server's
    /// idle time.
    fn state_deadline(&self) -> Option<u64> {
        None
    }
    /// Its counters by name (for metrics and tests).
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
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

/// The most replica records a server keeps for a buddy that has not taken them
/// ([`Server::put_back_replicas`]).
pub const MAX_PENDING_REPLICAS: usize = 1 << 20;

/// A server: its handler and its live flows.
pub struct Server {
    ethertype: u16,
    program: u16,
    handler: Box<dyn RemoteHandler>,
    /// Live flows: until when each is live (ns): its last packet's time and the idle time,
    /// or later while its handler's state for it lives ([`RemoteHandler::state_deadline`]).
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
    /// packets, or while its handler's state for it lives
    /// ([`RemoteHandler::state_deadline`]), whichever is later.
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
        // Taken every batch, kept only for a buddy: a handler's records never pile up.
        self.handler.take_new(&mut self.replicas);
        if !self.replicate {
            self.replicas.clear();
        }
    }

    /// The records of the entries its handler made since the last call, for its buddy: the
    /// runtime hands them over before it sends the batch's responses (so a failover finds
    /// every entry a response has told of).
    pub fn take_replicas(&mut self) -> Vec<Vec<u8>> {
        std::mem::take(&mut self.replicas)
    }

    /// Its buddy restarted and lost its replicas: every entry its handler made itself and
    /// holds at `now_ns` goes to it again with the next replicas ([`RemoteHandler::own_records`]).
    /// Returns how many records were queued (none without a buddy).
    pub fn resync(&mut self, now_ns: u64) -> usize {
        if !self.replicate {
            return 0;
        }
        let before = self.replicas.len();
        self.handler.own_records(now_ns, &mut self.replicas);
        let dropped = self.replicas.len().saturating_sub(MAX_PENDING_REPLICAS);
        self.replicas.drain(..dropped);
        self.replicas.len() - before.saturating_sub(dropped)
    }

    /// Records of `take_replicas` its buddy did not take (down, or not answering in time):
    /// kept, ahead of newer ones, for the runtime's next try, so that a buddy that comes back
    /// holds them. At most [`MAX_PENDING_REPLICAS`] are kept, the oldest dropped first;
    /// returns how many were dropped.
    pub fn put_back_replicas(&mut self, mut records: Vec<Vec<u8>>) -> usize {
        if !self.replicate {
            return records.len();
        }
        records.append(&mut self.replicas);
        let dropped = records.len().saturating_sub(MAX_PENDING_REPLICAS);
        records.drain(..dropped);
        self.replicas = records;
        dropped
    }

    /// Records waiting for the buddy (new since the last `take_replicas`, or put back).
    pub fn pending_replicas(&self) -> usize {
        self.replicas.len()
    }

    /// The records of entries adopted here from other servers, for each to take back its own
    /// when it comes back ([`RemoteHandler::hand_back`]).
    pub fn hand_back(&mut self) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        self.handler.hand_back(&mut out);
        out
    }

    /// Another server was failed over to this one at `now_ns`, which now serves the entries it
    /// adopted from it: the flows of what it holds are live here ([`RemoteHandler::held_flows`]:
    /// a group change pins them here before their next packet), and those go to its own buddy
    /// with its next replicas (the records its handler would hand back,
    /// [`RemoteHandler::hand_back`]), so that a failure of this server too, before those
    /// entries see a packet here, loses none of them. Returns how many records were queued
    /// (none if it has no buddy).
    pub fn take_over(&mut self, now_ns: u64) -> usize {
        self.hold_live(now_ns);
        if !self.replicate {
            return 0;
        }
        let before = self.replicas.len();
        self.handler.hand_back(&mut self.replicas);
        self.replicas.len() - before
    }

    /// Takes back what its buddy handed back at `now_ns` ([`RemoteHandler::take_back`]); when
    /// that brought something, the flows of what it holds are live (replies to its public pairs still reach it if it leaves
    /// the group); returns how many records were refused.
    pub fn take_back(&mut self, now_ns: u64, records: &[Vec<u8>]) -> usize {
        let before = self.handler.taken_back();
        let refused = self.handler.take_back(now_ns, records);
        // A walk of what it holds only when the hand-back brought something (it is asked again
        // every second while it holds any).
        if self.handler.taken_back() > before {
            self.hold_live(now_ns);
        }
        refused
    }

    /// The flows of every entry its handler holds are live until their state's deadline (or
    /// the idle time from `now_ns`, if later).
    fn hold_live(&mut self, now_ns: u64) {
        let mut flows = Vec::new();
        self.handler.held_flows(now_ns, &mut flows);
        let idle = now_ns.saturating_add(self.idle_ns);
        for (f, until) in flows {
            let until = until.map_or(idle, |u| u.max(idle));
            let t = self.live.entry(f).or_insert(until);
            *t = (*t).max(until);
        }
    }

    /// Entries held because the buddy handed them back ([`RemoteHandler::taken_back`]).
    pub fn taken_back(&self) -> usize {
        self.handler.taken_back()
    }

    /// Takes another server's replicas at `now_ns`; returns how many were refused.
    pub fn adopt_replicas(&mut self, now_ns: u64, records: &[Vec<u8>]) -> usize {
        records.iter().filter(|r| self.handler.adopt_replica(now_ns, r).is_err()).count()
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
        self.handler.handle(now_ns, flow, l3, &request[..plen], h.params_mut()).map_err(|_| ServerDrop::Handler)?;
        h.set_kind(Kind::Response);
        h.set_flags(if busy { clip::FLAG_BUSY } else { 0 });
        if self.path_ns > 0 {
            tern_io::spin_for(std::time::Duration::from_nanos(self.path_ns));
        }
        let mut until = now_ns.saturating_add(self.idle_ns);
        if until < u64::MAX
            && let Some(d) = self.handler.state_deadline()
        {
            until = until.max(d);
        }
        self.live.insert(flow, until);
        self.stats.responses += 1;
        self.stats.busy_responses += u64::from(busy);
        Ok(())
    }

    /// Forgets flows idle for the idle time (and whose handler state is gone); returns them
    /// (ended flows, for the switch's pins).
    pub fn expire(&mut self, now_ns: u64) -> Vec<FlowId> {
        let mut ended = Vec::new();
        self.live.retain(|&f, &mut until| {
            let live = now_ns < until;
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

/// CLIP's SNAT (Appendix A; docs/clip.md, "SNAT") as a remote handler: the server's mirror of
/// the switch's `nat` table is a [`Nat`] — netfilter's port choice, timeouts and TCP states —
/// over the server's own public addresses (or its slice of shared ones). A request's `dir`
/// (its byte 8: 0 out, 1 in; absent: out) says which way the packet goes. A TCP or UDP
/// packet's connection is found or made and the response says what to write: the public
/// address and port going out (`dir` 0: the switch rewrites the source), the inside host's
/// coming in (`dir` 1: the destination); an ICMP echo or error is translated here, in place
/// (`dir` 2: nothing left to rewrite). The response: address (4 bytes), port (2), `dir` (1),
/// big-endian — the program's `res.addr`, `res.port` and `res.dir`.
#[derive(Debug)]
pub struct Snat {
    nat: Nat,
    /// Connections made since the last `take_new`.
    fresh: Vec<Tuple>,
    /// Connections its buddy handed back at the last `take_back` that it did not hold itself.
    taken_back: hashbrown::HashSet<Tuple>,
    /// Connections adopted from replicas with another server's public pair: what `hand_back`
    /// reads (not the whole table). A key whose connection is gone, or is now this server's
    /// own, is dropped when next read.
    adopted: hashbrown::HashSet<Tuple>,
    /// When each connection this server replicated is due to be replicated again (ns): half
    /// its timeout after its last record, well before the buddy's copy, which sees no packets,
    /// expires. So the buddy holds every live connection, however long it lives.
    refresh_at: hashbrown::HashMap<Tuple, u64>,
    /// The connection the last request touched (for `state_deadline`).
    last: Option<Tuple>,
}

/// Whether public pair `p` is the server of `cfg`'s to give out: one of its addresses, a port
/// (or ICMP id) of its slice.
fn owns(cfg: &NatConfig, p: (u32, u16)) -> bool {
    cfg.addrs.contains(&p.0) && p.1 % cfg.slices.max(1) == cfg.slice
}

/// A replica record's bytes.
const SNAT_RECORD: usize = 21;

/// A SNAT replica record of connection `c` (the layout under `take_new`).
fn snat_record(c: &Connection) -> Vec<u8> {
    let t = c.orig;
    let mut r = Vec::with_capacity(SNAT_RECORD);
    r.push(t.proto);
    r.extend_from_slice(&t.src.to_be_bytes());
    r.extend_from_slice(&t.sport.to_be_bytes());
    r.extend_from_slice(&t.dst.to_be_bytes());
    r.extend_from_slice(&t.dport.to_be_bytes());
    r.extend_from_slice(&c.public.0.to_be_bytes());
    r.extend_from_slice(&c.public.1.to_be_bytes());
    r.push(c.tcp.map_or(0xff, |s| s as u8));
    r.push(u8::from(c.replied));
    r
}

impl Snat {
    /// The connection a replica record describes, its timeout starting at `now_ns`; a record
    /// that does not read is refused by name.
    fn connection_of(&self, now_ns: u64, r: &[u8]) -> Result<Connection, &'static str> {
        if r.len() != SNAT_RECORD {
            return Err("record_length");
        }

        let u16_at = |i: usize| u16::from_be_bytes([r[i], r[i + 1]]);
        let u32_at = |i: usize| u32::from_be_bytes([r[i], r[i + 1], r[i + 2], r[i + 3]]);
        let orig = Tuple { proto: r[0], src: u32_at(1), sport: u16_at(5), dst: u32_at(7), dport: u16_at(11) };
        let tcp = match r[19] {
            0xff if orig.proto != nat::TCP => None,
            s if orig.proto == nat::TCP => match TcpState::ALL.get(usize::from(s)) {
                Some(TcpState::SynSent | TcpState::SynRecv) => Some(TcpState::Established),
                Some(&st) => Some(st),
                None => return Err("record_state"),
            },
            _ => return Err("record_state"),
        };
        let mut c = Connection { orig, public: (u32_at(13), u16_at(17)), tcp, replied: r[20] != 0, deadline: 0 };
        c.deadline = now_ns.saturating_add(nat::timeout(&self.nat.config().timeouts, &c));
        Ok(c)
    }

    /// Whether public pair `p` is this server's to give out: one of its addresses, a port (or
    /// ICMP id) of its slice.
    fn owns(&self, p: (u32, u16)) -> bool {
        owns(self.nat.config(), p)
    }

    /// Queues connection `orig` for its buddy (`take_new`) if it is new, or if half its timeout
    /// has passed since its last record: the buddy's copy sees no packets, so
    /// without a refresh a connection in use longer than its timeout would be gone there when
    /// this server fails.
    fn replicate_if_due(&mut self, orig: Tuple, new: bool, now_ns: u64) {
        // One lookup a packet; the connection itself only when a record is due.
        if !new && self.refresh_at.get(&orig).is_some_and(|&t| t > now_ns) {
            return;
        }
        let Some(c) = self.nat.get(&orig, now_ns) else { return };
        self.fresh.push(orig);
        self.refresh_at.insert(orig, now_ns.saturating_add(c.deadline.saturating_sub(now_ns) / 2));
        // Keys of connections gone since do not pile up: at most about twice the table.
        if self.refresh_at.len() > 2 * self.nat.len() + 1024 {
            let Snat { nat, refresh_at, .. } = self;
            refresh_at.retain(|t, _| nat.get(t, 0).is_some());
        }
    }

    /// Drops the adopted keys whose connection is gone or is this server's own now.
    fn prune_adopted(&mut self) {
        let Snat { nat, adopted, .. } = self;
        adopted.retain(|t| nat.get(t, 0).is_some_and(|c| !owns(nat.config(), c.public)));
    }

    /// A SNAT with `cfg`.
    pub fn new(cfg: NatConfig) -> Result<Snat, String> {
        Ok(Snat {
            nat: Nat::new(cfg)?,
            fresh: Vec::new(),
            taken_back: Default::default(),
            adopted: Default::default(),
            refresh_at: Default::default(),
            last: None,
        })
    }

    /// Server `index`'s SNAT: its own address 192.0.2.`index+1`, every port (docs/clip.md).
    pub fn for_server(index: u16) -> Result<Snat, String> {
        let last = u8::try_from(index + 1).map_err(|_| format!("snat: server {index}: at most 254 servers"))?;
        Snat::new(NatConfig {
            seed: u64::from(index) + 1,
            ..NatConfig::new(u32::from(std::net::Ipv4Addr::new(192, 0, 2, last)))
        })
    }

    /// Its translation state.
    pub fn nat(&self) -> &Nat {
        &self.nat
    }
}

impl RemoteHandler for Snat {
    fn name(&self) -> &'static str {
        "snat"
    }

    fn handle(
        &mut self,
        now_ns: u64,
        _flow: FlowId,
        l3: &mut [u8],
        request: &[u8],
        response: &mut [u8],
    ) -> Result<(), &'static str> {
        if response.len() < 7 {
            return Err("response_length");
        }
        let dir = match request.get(8) {
            None | Some(0) => Dir::Out,
            Some(1) => Dir::In,
            Some(_) => return Err("request_dir"),
        };
        let made = self.nat.counters.created;
        // Read once: TCP, UDP or another protocol is tracked here and rewritten by the switch;
        // ICMP (and what does not parse: counted there) is translated here.
        let (tr, code) = match nat::parse(l3, dir) {
            Ok(Parsed::Conn { t, flags, .. }) if t.proto != nat::ICMP => {
                (self.nat.track_conn(t, flags, dir, now_ns), dir as u8)
            }
            _ => (self.nat.translate(l3, dir, now_ns), 2),
        };
        self.last = None;
        let tr = tr.map_err(NatDrop::name)?;
        self.last = Some(tr.orig);
        self.replicate_if_due(tr.orig, self.nat.counters.created > made, now_ns);
        let (addr, port) = if dir == Dir::Out { tr.public } else { (tr.orig.src, tr.orig.sport) };
        response[..4].copy_from_slice(&addr.to_be_bytes());
        response[4..6].copy_from_slice(&port.to_be_bytes());
        response[6] = code;
        response[7..].fill(0);
        Ok(())
    }

    fn entries(&self) -> usize {
        self.nat.len()
    }

    /// Every connection with one of its own public pairs.
    fn own_records(&mut self, now_ns: u64, out: &mut Vec<Vec<u8>>) {
        let cfg = self.nat.config();
        out.extend(self.nat.connections(now_ns).filter(|c| owns(cfg, c.public)).map(|c| snat_record(&c)));
    }

    /// Each connection's flow (the id of its packets going out) and timeout.
    fn held_flows(&mut self, now_ns: u64, out: &mut Vec<(FlowId, Option<u64>)>) {
        out.extend(self.nat.connections(now_ns).map(|c| {
            let t = c.orig;
            (crate::flow::flow_id_of(t.src, t.dst, t.proto, t.sport, t.dport), Some(c.deadline))
        }));
    }

    /// The connection's timeout: the flow stays on this server while the connection lives, as
    /// netfilter keeps it.
    fn state_deadline(&self) -> Option<u64> {
        self.nat.get(self.last.as_ref()?, 0).map(|c| c.deadline)
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let c = &self.nat.counters;
        let mut v = vec![
            ("created", c.created),
            ("expired", c.expired),
            ("kept_port", c.kept_port),
            ("out", c.out),
            ("in", c.in_),
            ("icmp_errors", c.icmp_errors),
        ];
        v.extend(NatDrop::ALL.iter().map(|&d| (d.name(), c.drop_count(d))));
        v
    }

    /// A record: the original tuple (protocol 1 byte, source 4, port 2, destination 4, port 2),
    /// the public address (4) and port (2), the TCP state (1: its index, 0xff none) and
    /// whether a reply came (1); big-endian.
    fn take_new(&mut self, out: &mut Vec<Vec<u8>>) {
        for t in self.fresh.drain(..) {
            let Some(c) = self.nat.get(&t, 0) else { continue };
            out.push(snat_record(&c));
        }
    }

    /// Connections whose public pair is not this server's (another address, or a port of
    /// another slice): adopted from another server. Reads the adopted ones only, not the
    /// table.
    fn hand_back(&mut self, out: &mut Vec<Vec<u8>>) {
        self.prune_adopted();
        out.extend(self.adopted.iter().filter_map(|t| self.nat.get(t, 0)).map(|c| snat_record(&c)));
    }

    /// Its own connections adopted (one taken back before kept, its timeout restarted; one it
    /// holds itself left alone); they expire by their timeouts, as the buddy's copies do.
    fn take_back(&mut self, now_ns: u64, records: &[Vec<u8>]) -> usize {
        let mut refused = 0;
        let mut now = hashbrown::HashSet::new();
        for r in records {
            match self.connection_of(now_ns, r) {
                Ok(c) if !self.owns(c.public) => {}
                Ok(c) if self.nat.get(&c.orig, 0).is_some() && !self.taken_back.contains(&c.orig) => {}
                Ok(c) => match self.nat.readopt(c) {
                    Ok(()) => {
                        now.insert(c.orig);
                    }
                    Err(_) => refused += 1,
                },
                Err(_) => refused += 1,
            }
        }
        self.taken_back = now;
        refused
    }

    fn taken_back(&self) -> usize {
        self.taken_back.iter().filter(|t| self.nat.get(t, 0).is_some()).count()
    }

    /// A replica's connection keeps its public address and port; its timeout starts at
    /// `now_ns`, and a TCP connection still opening is taken as established (its buddy saw
    /// its first packet only; netfilter's loose pick-up does the same).
    fn adopt_replica(&mut self, now_ns: u64, r: &[u8]) -> Result<(), &'static str> {
        let c = self.connection_of(now_ns, r)?;
        // A record of a connection held already with the same pair refreshes it (its owner
        // still uses it); one whose tuples another connection holds is refused.
        self.nat.readopt(c)?;
        if !self.owns(c.public) {
            self.adopted.insert(c.orig);
            // Keys of connections gone since do not pile up: at most about twice the table.
            if self.adopted.len() > 2 * self.nat.len() + 1024 {
                self.prune_adopted();
            }
        }
        Ok(())
    }

    fn dump(&self, max: usize) -> Vec<(String, String)> {
        let ip = |v: u32| std::net::Ipv4Addr::from(v);
        let proto = |p: u8| match p {
            nat::TCP => "tcp".to_string(),
            nat::UDP => "udp".to_string(),
            nat::ICMP => "icmp".to_string(),
            p => p.to_string(),
        };
        self.nat
            .connections(0)
            .take(max)
            .map(|c| {
                let k = c.orig;
                let state = c.tcp.map_or(if c.replied { "replied" } else { "unreplied" }, TcpState::name);
                (
                    format!("{} {}:{} -> {}:{}", proto(k.proto), ip(k.src), k.sport, ip(k.dst), k.dport),
                    format!("{}:{} {state}", ip(c.public.0), c.public.1),
                )
            })
            .collect()
    }
}

/// CLIP's TCP retransmission detection (docs/clip.md, "TCP retransmission detection") as a
/// remote handler over [`crate::trd::Trd`]: the response is a register index (4 bytes), the
/// highest end to start it at (4) and what to do (1: 0 nothing, 1 allocated — install the
/// direction's entry and set its registers, 2 released — take its entry out and its count),
/// big-endian: the program's `res.index`, `res.init` and `res.op`.
#[derive(Debug)]
pub struct TrdHandler {
    trd: crate::trd::Trd,
    /// Replica records of the directions opened and closed since `take_new`.
    fresh: Vec<Vec<u8>>,
    /// Directions its buddy handed back (with registers of this server's slice) at the last
    /// `take_back`: held until the buddy hands them back no more.
    taken_back: hashbrown::HashSet<crate::trd::Direction>,
}

/// A TRD replica record: kind 1 (opened: the direction's source, destination, ports, its
/// index or 0xFFFFFFFF, its highest end; 21 bytes) or kind 2 (closed: the direction; 13 bytes);
/// big-endian.
const TRD_OPENED: u8 = 1;
const TRD_CLOSED: u8 = 2;

/// A TRD replica record read.
enum TrdRecord {
    /// (direction, index, highest end).
    Opened(crate::trd::Direction, Option<u32>, u32),
    Closed(crate::trd::Direction),
}

/// Reads a TRD replica record; one that does not read is refused by name (`record_kind`,
/// `record_length`).
fn read_trd_record(r: &[u8]) -> Result<TrdRecord, &'static str> {
    let u32_at = |i: usize| u32::from_be_bytes([r[i], r[i + 1], r[i + 2], r[i + 3]]);
    let dir = || (u32_at(1), u32_at(5), u16::from_be_bytes([r[9], r[10]]), u16::from_be_bytes([r[11], r[12]]));
    match (r.first(), r.len()) {
        (Some(&TRD_OPENED), 21) => {
            Ok(TrdRecord::Opened(dir(), Some(u32_at(13)).filter(|&i| i != u32::MAX), u32_at(17)))
        }
        (Some(&TRD_CLOSED), 13) => Ok(TrdRecord::Closed(dir())),
        (Some(&(TRD_OPENED | TRD_CLOSED)), _) => Err("record_length"),
        _ => Err("record_kind"),
    }
}

fn trd_record(kind: u8, d: &crate::trd::Direction, index: Option<u32>, highest: u32) -> Vec<u8> {
    let mut r = Vec::with_capacity(21);
    r.push(kind);
    r.extend_from_slice(&d.0.to_be_bytes());
    r.extend_from_slice(&d.1.to_be_bytes());
    r.extend_from_slice(&d.2.to_be_bytes());
    r.extend_from_slice(&d.3.to_be_bytes());
    if kind == TRD_OPENED {
        r.extend_from_slice(&index.unwrap_or(u32::MAX).to_be_bytes());
        r.extend_from_slice(&highest.to_be_bytes());
    }
    r
}

impl TrdHandler {
    pub fn new(cfg: crate::trd::TrdConfig) -> Result<TrdHandler, String> {
        Ok(TrdHandler { trd: crate::trd::Trd::new(cfg)?, fresh: Vec::new(), taken_back: Default::default() })
    }

    /// Its detector's state.
    pub fn trd(&self) -> &crate::trd::Trd {
        &self.trd
    }
}

impl RemoteHandler for TrdHandler {
    fn name(&self) -> &'static str {
        "trd"
    }

    fn handle(
        &mut self,
        _now_ns: u64,
        _flow: FlowId,
        l3: &mut [u8],
        _request: &[u8],
        response: &mut [u8],
    ) -> Result<(), &'static str> {
        use crate::trd::Answer;
        if response.len() < 9 {
            return Err("response_length");
        }
        let (opened, tracked) = (self.trd.counters.opened, self.trd.len());
        let (index, init, op) = match self.trd.handle(l3).map_err(crate::trd::TrdDrop::name)? {
            Answer::Allocated { index, init } => (index, init, 1),
            Answer::Released { index } => (index, 0, 2),
            Answer::Checked { .. } => (0, 0, 0),
        };
        // What a buddy needs to go on after a failover: the directions opened and closed.
        if let Some((d, ..)) = crate::trd::segment(l3) {
            if self.trd.counters.opened > opened {
                let highest = self.trd.highest_of(&d).unwrap_or(0);
                self.fresh.push(trd_record(TRD_OPENED, &d, self.trd.index_of(&d), highest));
            } else if self.trd.len() < tracked {
                self.fresh.push(trd_record(TRD_CLOSED, &d, None, 0));
            }
        }
        response[..4].copy_from_slice(&index.to_be_bytes());
        response[4..8].copy_from_slice(&init.to_be_bytes());
        response[8] = op;
        response[9..].fill(0);
        Ok(())
    }

    fn entries(&self) -> usize {
        self.trd.len()
    }

    fn take_new(&mut self, out: &mut Vec<Vec<u8>>) {
        out.append(&mut self.fresh);
    }

    /// Every direction it tracks but those holding another server's register.
    fn own_records(&mut self, _now_ns: u64, out: &mut Vec<Vec<u8>>) {
        let trd = &self.trd;
        out.extend(
            trd.directions()
                .filter(|(_, index, _)| index.is_none_or(|i| trd.owns(i)))
                .map(|(d, index, highest)| trd_record(TRD_OPENED, &d, index, highest)),
        );
    }

    /// Each direction's flow.
    fn held_flows(&mut self, _now_ns: u64, out: &mut Vec<(FlowId, Option<u64>)>) {
        out.extend(
            self.trd.directions().map(|((src, dst, sp, dp), ..)| (crate::flow::flow_id_of(src, dst, 6, sp, dp), None)),
        );
    }

    /// Directions holding a register of another server's slice: adopted from it.
    fn hand_back(&mut self, out: &mut Vec<Vec<u8>>) {
        out.extend(self.trd.adopted().map(|(d, index, highest)| trd_record(TRD_OPENED, &d, Some(index), highest)));
    }

    /// The directions holding registers of this server's slice are held here (those registers
    /// out of its free ones) until its buddy hands them back no more: then they are let go,
    /// their registers free again (not after an answer with a record that does not read).
    fn take_back(&mut self, _now_ns: u64, records: &[Vec<u8>]) -> usize {
        let mut now = hashbrown::HashSet::new();
        let mut refused = 0;
        for r in records {
            let Ok(TrdRecord::Opened(d, index, highest)) = read_trd_record(r) else {
                refused += 1;
                continue;
            };
            if !index.is_some_and(|i| self.trd.owns(i)) {
                continue;
            }
            let held = self.trd.index_of(&d).is_some();
            if held && !self.taken_back.contains(&d) {
                // Its own: it made this direction itself (the buddy holds its replica).
                continue;
            }
            // Taken back before and still held here; else (new, or gone since — a FIN seen
            // here, a close record) adopted now.
            if held || self.trd.adopt(d, index, highest).is_ok() {
                now.insert(d);
            } else {
                refused += 1;
            }
        }
        if refused > 0 {
            // An answer with records that do not read lets nothing go.
            self.taken_back.extend(now);
            return refused;
        }
        for d in self.taken_back.difference(&now) {
            self.trd.forget(d);
        }
        self.taken_back = now;
        refused
    }

    fn taken_back(&self) -> usize {
        self.taken_back.iter().filter(|d| self.trd.index_of(d).is_some()).count()
    }

    /// An opened direction is tracked here with its index (kept out of this server's own free
    /// indices unless of its slice), a closed one forgotten: after a failover this server
    /// releases the failed server's indices at their FIN or RST.
    fn adopt_replica(&mut self, _now_ns: u64, r: &[u8]) -> Result<(), &'static str> {
        match read_trd_record(r)? {
            TrdRecord::Opened(d, index, highest) => self.trd.adopt(d, index, highest),
            TrdRecord::Closed(d) => {
                self.trd.forget(&d);
                Ok(())
            }
        }
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let c = self.trd.counters;
        vec![
            ("opened", c.opened),
            ("indexed", c.indexed),
            ("no_index", c.no_index),
            ("released", c.released),
            ("checked", c.checked),
            ("retransmissions", c.retransmissions),
            ("not_tcp", c.not_tcp),
            ("table_full", c.table_full),
        ]
    }

    fn dump(&self, max: usize) -> Vec<(String, String)> {
        let ip = |v: u32| std::net::Ipv4Addr::from(v);
        self.trd
            .directions()
            .take(max)
            .map(|((s, d, sp, dp), index, highest)| {
                let at = index.map_or("server path".to_string(), |i| format!("register {i}"));
                (format!("tcp {}:{sp} -> {}:{dp}", ip(s), ip(d)), format!("{at}, highest end {highest}"))
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
    /// Whether servers hand their buddies replicas (on by default; off shows what a failover
    /// without them loses).
    pub replicate: bool,
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
            replicate: true,
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
                moved = true;
                if !self.alive[s] {
                    self.lost += self.spare.len() as u64;
                    self.spare.recycle(&self.pool);
                    continue;
                }
                let srv = &mut self.servers[s];
                srv.replicate = self.replicate && self.buddy[s].is_some();
                srv.process(self.now_ns, &mut self.spare, self.busy[s], &self.pool);
                // Replicas reach the buddy before the responses go on (kept while it is down).
                self.replicate_from(s);
                self.switch.process(sp, &mut self.spare, &mut self.outs, &self.pool);
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
            if self.fail_over(dead, buddy as u16).is_ok() {
                self.heartbeats.forget(dead);
                out.push(dead);
            }
        }
        out
    }

    /// Fails `dead` over to `buddy` (the controller's part: [`Switch::fail_over`]), and the
    /// buddy takes over ([`Server::take_over`]): what it adopted goes to its own buddy now.
    ///
    /// [`Switch::fail_over`]: crate::switch::Switch::fail_over
    pub fn fail_over(
        &mut self,
        dead: crate::group::ServerId,
        buddy: crate::group::ServerId,
    ) -> Result<(), crate::switch::SwitchError> {
        self.switch.fail_over(dead, buddy)?;
        self.failed_over.push((dead, buddy));
        let b = usize::from(buddy);
        if let Some(srv) = self.servers.get_mut(b) {
            srv.replicate = self.replicate && self.buddy[b].is_some();
            srv.take_over(self.now_ns);
            self.replicate_from(b);
        }
        Ok(())
    }

    /// Server `s`'s replica records to its buddy if it is running; else kept at `s`
    /// ([`Server::put_back_replicas`]).
    fn replicate_from(&mut self, s: usize) {
        let replicas = self.servers[s].take_replicas();
        if replicas.is_empty() {
            return;
        }
        match self.buddy[s] {
            Some(d) if self.alive.get(d) == Some(&true) => {
                self.servers[d].adopt_replicas(self.now_ns, &replicas);
            }
            _ => {
                self.servers[s].put_back_replicas(replicas);
            }
        }
    }

    /// Server `d` runs again after a restart (empty, its own entries taken back from its
    /// buddy): every server whose buddy it is sends it its own entries again
    /// ([`Server::resync`]).
    pub fn restarted(&mut self, d: usize) {
        self.alive[d] = true;
        for s in 0..self.servers.len() {
            if self.buddy[s] == Some(d) && self.alive[s] {
                self.servers[s].replicate = self.replicate;
                self.servers[s].resync(self.now_ns);
                self.replicate_from(s);
            }
        }
    }

    /// Every running server's waiting replica records to its buddy, if that one runs (what a
    /// runtime's retries do while time passes).
    pub fn flush_replicas(&mut self) {
        for s in 0..self.servers.len() {
            if self.alive[s] {
                self.replicate_from(s);
            }
        }
    }

    /// The servers' live flows, ⟨flow, server⟩ (what the controller takes before a change).
    pub fn live_flows(&self) -> Vec<(FlowId, crate::group::ServerId)> {
        self.servers.iter().enumerate().flat_map(|(s, v)| v.live_flows().map(move |f| (f, s as u16))).collect()
    }
}

/// The remote handlers Tern has, by the name programs give (`handler = "..."`): server `index`
/// of a group gets its own (SNAT: address 192.0.2.`index+1`, every port; TCP retransmission
/// detection: the register indices `i` with `i mod 16 == index` of 4096).
pub fn handler(name: &str, index: u16) -> Result<Box<dyn RemoteHandler>, String> {
    match name {
        "snat" => Ok(Box::new(Snat::for_server(index)?)),
        "trd" => Ok(Box::new(TrdHandler::new(crate::trd::TrdConfig::for_server(index)?)?)),
        other => Err(format!("no remote handler `{other}` (Tern has: snat, trd)")),
    }
}
