//! The switch (CLIP §III, Figure 3; docs/clip.md, "The switch"), sans I/O: a loaded program's
//! [`Pipeline`], the server group's [`Selector`], the heavy-hitter [`Offload`] of the program's
//! mirrored table, and regular forwarding, joined on frames in batches.
//!
//! Ports are numbered from 1. Some are *server ports* (server `s` of the group sits behind
//! `servers[s]`); the others are *host ports*.
//!
//! A frame from a host port:
//! 1. CLIP's EtherType: dropped (`spoofed_header`: only servers speak CLIP);
//! 2. ARP: a request for the switch's own address is answered out of the same port; any other
//!    ARP frame is dropped (`arp_not_ours`);
//! 3. otherwise `pre_processing` runs. `flight` set: the frame gets a request header (the
//!    program's parameters, `parsed_len`, the chosen group's version, a request id) and goes to
//!    the server the selector picks for its flow — never to a host port. Otherwise it leaves by
//!    the port an action set (a server port is refused: `egress_to_server`) or by regular
//!    forwarding: the longest prefix of its IPv4 destination among the routes gives a port and
//!    the next hop's MAC address (the source becomes the switch's); no route: `no_route`; not
//!    IPv4: `not_ipv4`.
//!
//! A frame from a server port must be a response of the loaded program from a server the
//! selector still sends to (else `server_not_clip`, a header error by its field, `not_response`,
//! `unknown_program`, `not_member`, `param_len`); its `BUSY` flag marks the server busy or not;
//! its header comes out (the original frame back, byte for byte) and `post_processing` runs with
//! the response's parameters; it then leaves as above, never to a server (no loops).
//!
//! The offload: each packet that reaches the mirrored table is counted by [`Offload::packet`]
//! under its entry's id (the hash of the table's key); a flow whose estimate crosses the digest
//! threshold is learned from its next response (the program's `learn` action, its parameters
//! from the response's fields); [`Switch::interval`] (the controller) moves the chosen entries
//! into the switch's table and evicts those that fell out.

use std::net::Ipv4Addr;

use hashbrown::HashMap;
use ipnet::Ipv4Net;
use tern_io::{Batch, Packet, Pool};
use tern_table::lpm::Lpm4;
use tern_wire::clip::{self, FIXED_LEN, Header, Kind, Repr};

use crate::group::{FlowId, GroupError, Path, Selector, SelectorConfig, ServerId};
use crate::offload::{IntervalReport, Offload, OffloadConfig, Served};
use crate::pipeline::{KeyMatch, LearnDecision, Outcome, Pipeline, hash_values};
use crate::program::Program;

/// A route of regular forwarding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Route {
    pub prefix: Ipv4Net,
    pub port: u16,
    /// The next hop's MAC address (the frame's new destination).
    pub mac: [u8; 6],
}

/// How a switch is built.
#[derive(Debug, Clone)]
pub struct SwitchConfig {
    /// CLIP's EtherType on this network.
    pub ethertype: u16,
    /// The switch's own addresses (ARP answers, the source of routed frames).
    pub mac: [u8; 6],
    pub ip: Ipv4Addr,
    /// Ports 1..=ports.
    pub ports: u16,
    /// Server `s`'s port is `servers[s]`.
    pub servers: Vec<u16>,
    /// The first group's members.
    pub members: Vec<ServerId>,
    pub routes: Vec<Route>,
    pub selector: SelectorConfig,
    /// The offload of the program's mirrored table (its capacity is at most the table's size).
    pub offload: OffloadConfig,
    /// Whether the offload runs (off: every miss of the mirrored table goes to a server).
    pub offload_enabled: bool,
    /// Candidates whose entries the switch learns an interval at most.
    pub learn_capacity: usize,
    /// Requests held for each busy server at most (more are shed).
    pub hold_capacity: usize,
    /// A server's BUSY mark lapses this long after its last BUSY response, ns (so that held
    /// requests go out even if it has none of the switch's requests left to answer).
    pub busy_timeout_ns: u64,
}

impl Default for SwitchConfig {
    fn default() -> SwitchConfig {
        SwitchConfig {
            ethertype: clip::DEFAULT_ETHERTYPE,
            mac: [0x02, 0, 0, 0, 0, 0xfe],
            ip: Ipv4Addr::new(10, 0, 0, 254),
            ports: 2,
            servers: Vec::new(),
            members: Vec::new(),
            routes: Vec::new(),
            selector: SelectorConfig::default(),
            offload: OffloadConfig::default(),
            offload_enabled: true,
            learn_capacity: 8192,
            hold_capacity: 1024,
            busy_timeout_ns: 1_000_000,
        }
    }
}

/// Why the switch dropped a frame: each a counter (`tern_switch_drops_total{reason}`), indexed
/// by its place in [`DropReason::ALL`] (the declaration order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum DropReason {
    /// Shorter than an Ethernet header.
    Malformed,
    /// A CLIP header from a host port.
    SpoofedHeader,
    /// A frame from a server port without CLIP's EtherType.
    ServerNotClip,
    /// The header's fields (as `tern_wire::clip` names them).
    HeaderTruncated,
    HeaderVersion,
    HeaderKind,
    HeaderFlags,
    HeaderLoadType,
    HeaderParsedLen,
    /// A request from a server.
    NotResponse,
    /// A program id the switch has not loaded.
    UnknownProgram,
    /// From a server the switch no longer sends to (or a port no server is behind).
    NotMember,
    /// `param_len` other than the program's.
    ParamLen,
    /// The program's `drop`.
    DroppedByProgram,
    /// `post_processing` refused the response (its length).
    ResponseLength,
    /// No route for the destination.
    NoRoute,
    /// Neither IPv4 nor ARP, and no port set.
    NotIpv4,
    /// ARP not asking for the switch.
    ArpNotOurs,
    /// An action sent a frame to a server port, or to a port the switch lacks.
    EgressToServer,
    BadPort,
    /// No room in the buffer for the header.
    NoHeadroom,
    /// An output batch was full.
    TxFull,
    /// A busy server's held queue was full.
    Shed,
    /// The program sent the frame to a server (`meta.server`) the switch does not send to.
    NoServer,
}

impl DropReason {
    /// Every reason, in the order of [`SwitchStats::drops`].
    pub const ALL: [DropReason; 24] = [
        DropReason::Malformed,
        DropReason::SpoofedHeader,
        DropReason::ServerNotClip,
        DropReason::HeaderTruncated,
        DropReason::HeaderVersion,
        DropReason::HeaderKind,
        DropReason::HeaderFlags,
        DropReason::HeaderLoadType,
        DropReason::HeaderParsedLen,
        DropReason::NotResponse,
        DropReason::UnknownProgram,
        DropReason::NotMember,
        DropReason::ParamLen,
        DropReason::DroppedByProgram,
        DropReason::ResponseLength,
        DropReason::NoRoute,
        DropReason::NotIpv4,
        DropReason::ArpNotOurs,
        DropReason::EgressToServer,
        DropReason::BadPort,
        DropReason::NoHeadroom,
        DropReason::TxFull,
        DropReason::Shed,
        DropReason::NoServer,
    ];

    /// Its name in metrics and docs.
    pub fn name(self) -> &'static str {
        match self {
            DropReason::Malformed => "malformed",
            DropReason::SpoofedHeader => "spoofed_header",
            DropReason::ServerNotClip => "server_not_clip",
            DropReason::HeaderTruncated => "header_truncated",
            DropReason::HeaderVersion => "header_version",
            DropReason::HeaderKind => "header_kind",
            DropReason::HeaderFlags => "header_flags",
            DropReason::HeaderLoadType => "header_load_type",
            DropReason::HeaderParsedLen => "header_parsed_len",
            DropReason::NotResponse => "not_response",
            DropReason::UnknownProgram => "unknown_program",
            DropReason::NotMember => "not_member",
            DropReason::ParamLen => "param_len",
            DropReason::DroppedByProgram => "dropped_by_program",
            DropReason::ResponseLength => "response_length",
            DropReason::NoRoute => "no_route",
            DropReason::NotIpv4 => "not_ipv4",
            DropReason::ArpNotOurs => "arp_not_ours",
            DropReason::EgressToServer => "egress_to_server",
            DropReason::BadPort => "bad_port",
            DropReason::NoHeadroom => "no_headroom",
            DropReason::TxFull => "tx_full",
            DropReason::Shed => "shed",
            DropReason::NoServer => "no_server",
        }
    }

    fn from_header(e: tern_wire::Error) -> DropReason {
        match e {
            tern_wire::Error::Truncated => DropReason::HeaderTruncated,
            tern_wire::Error::Malformed("version") => DropReason::HeaderVersion,
            tern_wire::Error::Malformed("kind") => DropReason::HeaderKind,
            tern_wire::Error::Malformed("flags") => DropReason::HeaderFlags,
            tern_wire::Error::Malformed("load_type") => DropReason::HeaderLoadType,
            tern_wire::Error::Malformed("parsed_len") => DropReason::HeaderParsedLen,
            tern_wire::Error::Malformed(_) => DropReason::ServerNotClip,
        }
    }
}

/// What the switch has done.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SwitchStats {
    /// Frames that left without a server: by the program's table (offloaded entries) or
    /// otherwise (regular traffic, other tables).
    pub switch_only: u64,
    /// Of those, frames the mirrored table's original served.
    pub offloaded: u64,
    /// Requests sent to servers, by how the server was found: the selector's pinned,
    /// diverted, current or previous, or the program's own choice (`meta.server`).
    pub to_server: [u64; 5],
    /// Responses taken back and sent on.
    pub responses: u64,
    /// ARP requests answered.
    pub arp_replies: u64,
    /// Drops, one per [`DropReason::ALL`].
    pub drops: [u64; DropReason::ALL.len()],
    /// Requests held for a busy server (sent when it is no longer busy).
    pub held: u64,
    /// Offload: candidates whose entry was not learned in time to install, and candidates
    /// beyond the learning table.
    pub unlearned: u64,
    pub learn_full: u64,
    /// The mirrored table and the offload's account disagreed (a bug if ever above 0).
    pub offload_mismatch: u64,
    /// Requests and responses by server.
    pub requests_by_server: Vec<u64>,
    /// A table kept by responses (`install`, `remove`): entries put in and taken out, and
    /// installs refused (the table full: the flow stays on the server path).
    pub installed_by_response: u64,
    pub removed_by_response: u64,
    pub install_refused: u64,
}

impl SwitchStats {
    /// A drop counter by reason.
    pub fn drop_count(&self, r: DropReason) -> u64 {
        self.drops[r as usize]
    }

    /// All drops.
    pub fn dropped(&self) -> u64 {
        self.drops.iter().sum()
    }

    /// Requests sent to servers.
    pub fn requests(&self) -> u64 {
        self.to_server.iter().sum()
    }
}

fn path_index(p: Path) -> usize {
    match p {
        Path::Pinned => 0,
        Path::Diverted => 1,
        Path::Current => 2,
        Path::Previous => 3,
    }
}

/// A learned entry of a mirrored table: the table's rank, the key and its learn action's
/// parameters.
type Learned = (usize, Box<[u64]>, Box<[u64]>);

/// The id the offload knows a mirrored table's entry by: the hash of its key, and for a table
/// after the first its rank too (two tables' entries never share an id).
pub fn entry_id(rank: usize, key: &[u64]) -> FlowId {
    if rank == 0 {
        hash_values(key)
    } else {
        crate::pipeline::hash_iter(key.iter().copied().chain([rank as u64 | 1 << 63]))
    }
}

/// The switch: data plane and controller.
#[derive(Debug)]
pub struct Switch {
    cfg: SwitchConfig,
    pipeline: Pipeline,
    selector: Selector,
    offload: Offload,
    routes: Lpm4,
    /// Server port → server id (`u16::MAX`: a host port), by port.
    server_of: Vec<u16>,
    /// Bytes of parameters the header carries; of them, the response's.
    param_len: usize,
    response_len: usize,
    next_request: u32,
    /// Offload: entries being learned this interval (None until the flow's response), and
    /// the installed entries' tables (by rank) and keys.
    learning: HashMap<FlowId, Option<Learned>>,
    installed: HashMap<FlowId, (usize, Box<[u64]>)>,
    key: Vec<u64>,
    params: Vec<u64>,
    response: [u8; 255],
    stats: SwitchStats,
    /// Requests held for busy servers, by server; the server the last request was held for.
    held: Vec<std::collections::VecDeque<Packet>>,
    hold: Option<u16>,
    /// The runtime's clock ([`tick`](Self::tick)) and each server's last BUSY response.
    now_ns: u64,
    last_busy_ns: Vec<u64>,
}

/// An error building a switch; names the item.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SwitchError {
    #[error("{0}")]
    Config(String),
    #[error(transparent)]
    Group(#[from] GroupError),
}

impl Switch {
    /// A switch running `program` (its tables empty), as `cfg` describes.
    pub fn new(program: Program, cfg: SwitchConfig) -> Result<Switch, SwitchError> {
        let bad = |s: String| Err(SwitchError::Config(s));
        if cfg.ports == 0 {
            return bad("a switch needs ports".into());
        }
        let mut server_of = vec![u16::MAX; usize::from(cfg.ports) + 1];
        for (s, &p) in cfg.servers.iter().enumerate() {
            if p == 0 || p > cfg.ports {
                return bad(format!("server {s}: port {p} is not a port of the switch (1 to {})", cfg.ports));
            }
            if server_of[usize::from(p)] != u16::MAX {
                return bad(format!("port {p} is named for two servers"));
            }
            server_of[usize::from(p)] = s as u16;
        }
        if let Some(m) = cfg.members.iter().find(|&&m| usize::from(m) >= cfg.servers.len()) {
            return bad(format!("member {m}: no such server ({} servers)", cfg.servers.len()));
        }
        let mut routes = Lpm4::new();
        for (i, r) in cfg.routes.iter().enumerate() {
            if r.port == 0 || r.port > cfg.ports || server_of[usize::from(r.port)] != u16::MAX {
                return bad(format!("route {}: port {} is not a host port", r.prefix, r.port));
            }
            routes
                .insert(r.prefix.trunc(), i as u32)
                .map_err(|e| SwitchError::Config(format!("route {}: {e}", r.prefix)))?;
        }
        let pipeline = Pipeline::new(program);
        let response_len = pipeline.program().response.iter().map(|(_, b)| b.div_ceil(8) as usize).sum();
        let param_len = pipeline.param_len().max(response_len);
        let mut ocfg = cfg.offload;
        if let Some(t) = pipeline.program().tables.iter().find(|t| t.mirrored) {
            ocfg.capacity = ocfg.capacity.min(t.size as usize);
        }
        if !cfg.offload_enabled || pipeline.learn_action().is_none() {
            ocfg.capacity = 0;
        }
        let offload = Offload::new(ocfg).map_err(|e| SwitchError::Config(format!("offload: {e}")))?;
        let members = if cfg.members.is_empty() && !cfg.servers.is_empty() { vec![0] } else { cfg.members.clone() };
        let selector = if members.is_empty() {
            // No servers: a group of a server that never gets a request (flight is refused
            // below before the selector runs).
            Selector::new(cfg.selector, &[0])?
        } else {
            Selector::new(cfg.selector, &members)?
        };
        let stats = SwitchStats { requests_by_server: vec![0; cfg.servers.len()], ..SwitchStats::default() };
        Ok(Switch {
            pipeline,
            selector,
            offload,
            routes,
            server_of,
            param_len,
            response_len,
            next_request: 0,
            learning: HashMap::new(),
            installed: HashMap::new(),
            key: Vec::with_capacity(8),
            params: Vec::with_capacity(8),
            response: [0; 255],
            stats,
            held: (0..cfg.servers.len()).map(|_| std::collections::VecDeque::new()).collect(),
            hold: None,
            now_ns: 0,
            last_busy_ns: vec![0; cfg.servers.len()],
            cfg,
        })
    }

    /// The configuration.
    pub fn config(&self) -> &SwitchConfig {
        &self.cfg
    }

    /// The pipeline (its tables and registers).
    pub fn pipeline(&self) -> &Pipeline {
        &self.pipeline
    }

    /// The pipeline, to add and remove entries.
    pub fn pipeline_mut(&mut self) -> &mut Pipeline {
        &mut self.pipeline
    }

    /// The server selection.
    pub fn selector(&self) -> &Selector {
        &self.selector
    }

    /// The offload's state.
    pub fn offload(&self) -> &Offload {
        &self.offload
    }

    /// Counters.
    pub fn stats(&self) -> &SwitchStats {
        &self.stats
    }

    /// Bytes of parameters a header of this program carries (`param_len`).
    pub fn param_len(&self) -> usize {
        self.param_len
    }

    /// Whether `port` is a server port.
    pub fn is_server_port(&self, port: u16) -> bool {
        self.server_of.get(usize::from(port)).is_some_and(|&s| s != u16::MAX)
    }

    fn count(&mut self, r: DropReason) {
        self.stats.drops[r as usize] += 1;
    }

    /// Takes every frame of `input` (received on `in_port`) and appends what leaves to
    /// `out[port]` (`out` has a batch for each port and one unused for port 0); drops go back
    /// to `pool`.
    pub fn process(&mut self, in_port: u16, input: &mut Batch, out: &mut [Batch], pool: &Pool) {
        let from_server = self.is_server_port(in_port);
        for mut p in input.drain() {
            let verdict =
                if from_server { self.server_frame(in_port, &mut p) } else { self.host_frame(in_port, &mut p) };
            if let Some(s) = self.hold.take() {
                let q = &mut self.held[usize::from(s)];
                if q.len() < self.cfg.hold_capacity {
                    q.push_back(p);
                    self.stats.held += 1;
                } else {
                    self.count(DropReason::Shed);
                    pool.put(p);
                }
                continue;
            }
            match verdict {
                Ok(port) => match out.get_mut(usize::from(port)) {
                    Some(b) => {
                        if let Some(back) = b.push(p) {
                            self.count(DropReason::TxFull);
                            pool.put(back);
                        }
                    }
                    None => {
                        self.count(DropReason::BadPort);
                        pool.put(p);
                    }
                },
                Err(r) => {
                    self.count(r);
                    pool.put(p);
                }
            }
        }
        self.release(out);
    }

    /// The runtime's clock: BUSY marks older than `busy_timeout_ns` lapse, and requests held
    /// for servers no longer busy go out into `out`.
    pub fn tick(&mut self, now_ns: u64, out: &mut [Batch]) {
        self.now_ns = now_ns;
        for s in 0..self.last_busy_ns.len() {
            let s16 = s as u16;
            if self.selector.is_busy(s16) && now_ns.saturating_sub(self.last_busy_ns[s]) >= self.cfg.busy_timeout_ns {
                self.selector.set_busy(s16, false);
            }
        }
        self.release(out);
    }

    /// Sends requests held for servers that are no longer busy, as room allows.
    fn release(&mut self, out: &mut [Batch]) {
        for (s, q) in self.held.iter_mut().enumerate() {
            if q.is_empty() || self.selector.is_busy(s as u16) {
                continue;
            }
            let Some(b) = out.get_mut(usize::from(self.cfg.servers[s])) else { continue };
            while !b.is_full() {
                let Some(p) = q.pop_front() else { break };
                let _ = b.push(p);
            }
        }
    }

    /// Requests held for busy servers now.
    pub fn held(&self) -> usize {
        self.held.iter().map(|q| q.len()).sum()
    }

    /// One frame from a host port: the port it leaves by.
    fn host_frame(&mut self, in_port: u16, p: &mut Packet) -> Result<u16, DropReason> {
        let f = p.data_mut();
        if f.len() < 14 {
            return Err(DropReason::Malformed);
        }
        let ty = u16::from_be_bytes([f[12], f[13]]);
        if ty == self.cfg.ethertype {
            return Err(DropReason::SpoofedHeader);
        }
        if ty == 0x0806 {
            return self.arp(in_port, f);
        }
        match self.pipeline.pre(f, in_port) {
            Outcome::Drop(why) => Err(program_drop(why)),
            Outcome::ToServer => {
                let served = self.account_offload(false);
                debug_assert_ne!(served, Some(Served::Switch));
                self.flight(p)
            }
            Outcome::Forward { port } => {
                if self.account_offload(true) == Some(Served::Switch) {
                    self.stats.offloaded += 1;
                }
                let out = self.egress(p, port)?;
                self.stats.switch_only += 1;
                Ok(out)
            }
        }
    }

    /// Counts a packet that reached the mirrored table in the offload; `forwarded`: the switch
    /// kept it. Returns where the offload says it was served.
    fn account_offload(&mut self, forwarded: bool) -> Option<Served> {
        let hit = self.pipeline.mirrored_hit()?;
        if self.pipeline.installs_by_response() {
            // Responses keep the table: the offload neither counts nor chooses.
            return Some(if hit { Served::Switch } else { Served::Server });
        }
        let id = entry_id(self.pipeline.mirrored_rank(), self.pipeline.mirrored_key());
        let (served, digest) = self.offload.packet_digest(id);
        if (served == Served::Switch) != hit || (hit && !forwarded) {
            self.stats.offload_mismatch += 1;
        }
        if digest && !self.learning.contains_key(&id) {
            if self.learning.len() < self.cfg.learn_capacity {
                self.learning.insert(id, None);
            } else {
                self.stats.learn_full += 1;
            }
        }
        Some(served)
    }

    /// Puts the request header on `p` and picks its server.
    fn flight(&mut self, p: &mut Packet) -> Result<u16, DropReason> {
        if self.cfg.servers.is_empty() {
            return Err(DropReason::NotMember);
        }
        let Some(flow) = crate::flow::flow_id(p.data()) else {
            // Not IPv4: a flow of its Ethernet addresses and type.
            let f = p.data();
            let id = hash_values(&[be(&f[0..6]), be(&f[6..12]), be(&f[12..14])]);
            return self.send_to(p, id);
        };
        self.send_to(p, flow)
    }

    fn send_to(&mut self, p: &mut Packet, flow: FlowId) -> Result<u16, DropReason> {
        // The program's own choice of server, or the group's by the flow.
        let (server, path) = match self.pipeline.server() {
            Some(s) => (self.selector.owner(s).ok_or(DropReason::NoServer)?, None),
            None => {
                let (s, path) = self.selector.select(flow);
                (s, Some(path))
            }
        };
        let version = match path {
            Some(Path::Previous) => self.selector.previous().map_or(0, |g| g.version),
            _ => self.selector.current().version,
        };
        let hl = FIXED_LEN + self.param_len;
        if !p.push_front(hl) {
            return Err(DropReason::NoHeadroom);
        }
        let f = p.data_mut();
        f.copy_within(hl..hl + 12, 0);
        let load_type = u16::from_be_bytes([f[hl + 12], f[hl + 13]]);
        f[12..14].copy_from_slice(&self.cfg.ethertype.to_be_bytes());
        let repr = Repr {
            kind: Kind::Request,
            flags: 0,
            load_type,
            parsed_len: self.pipeline.parsed_len(),
            program: self.pipeline.program().id,
            group_version: version,
            request_id: self.next_request,
            param_len: self.param_len as u8,
        };
        self.next_request = self.next_request.wrapping_add(1);
        let mut h = Header::new_unchecked(&mut f[14..]);
        repr.emit(&mut h);
        let params = h.params_mut();
        let req = self.pipeline.request();
        params[..req.len()].copy_from_slice(req);
        params[req.len()..].fill(0);
        self.stats.to_server[path.map_or(4, path_index)] += 1;
        if let Some(c) = self.stats.requests_by_server.get_mut(usize::from(server)) {
            *c += 1;
        }
        // A busy server's flows wait for it (its new flows were diverted by the selector).
        if self.selector.is_busy(server) {
            self.hold = Some(server);
        }
        Ok(self.cfg.servers[usize::from(server)])
    }

    /// One frame from server port `in_port`.
    fn server_frame(&mut self, in_port: u16, p: &mut Packet) -> Result<u16, DropReason> {
        let server = self.server_of[usize::from(in_port)];
        let f = p.data();
        if f.len() < 14 {
            return Err(DropReason::Malformed);
        }
        let (repr, params) = clip::peek(f, self.cfg.ethertype).map_err(DropReason::from_header)?;
        if repr.kind != Kind::Response {
            return Err(DropReason::NotResponse);
        }
        if repr.program != self.pipeline.program().id {
            return Err(DropReason::UnknownProgram);
        }
        if !self.selector.serves(server) {
            return Err(DropReason::NotMember);
        }
        if usize::from(repr.param_len) != self.param_len {
            return Err(DropReason::ParamLen);
        }
        if usize::from(repr.parsed_len) > f.len() - 14 - repr.header_len() {
            return Err(DropReason::HeaderParsedLen);
        }
        self.response[..self.response_len].copy_from_slice(&params[..self.response_len]);
        let busy = repr.flags & clip::FLAG_BUSY != 0;
        self.selector.set_busy(server, busy);
        if busy && let Some(t) = self.last_busy_ns.get_mut(usize::from(server)) {
            *t = self.now_ns;
        }
        // The header comes out: the addresses move up over it and `load_type` goes back.
        let hl = repr.header_len();
        let f = p.data_mut();
        f.copy_within(0..12, hl);
        p.pull_front(hl);
        let f = p.data_mut();
        f[12..14].copy_from_slice(&repr.load_type.to_be_bytes());
        let response = self.response;
        match self.pipeline.post(f, &response[..self.response_len]) {
            Outcome::Drop(why) => Err(program_drop(why)),
            Outcome::ToServer => Err(DropReason::EgressToServer),
            Outcome::Forward { port } => {
                self.learn();
                self.settle();
                self.stats.responses += 1;
                self.egress(p, port)
            }
        }
    }

    /// After a response, in a program whose mirrored table is kept by responses (`install`,
    /// `remove`): its entry goes in or out of the switch's table now.
    fn settle(&mut self) {
        let Some(d) = self.pipeline.learn_decision() else { return };
        let (mut key, mut params) = (std::mem::take(&mut self.key), std::mem::take(&mut self.params));
        if self.pipeline.learned(&mut key, &mut params) {
            match d {
                LearnDecision::Install => match self.install_now(&key, &params) {
                    Ok(()) => self.stats.installed_by_response += 1,
                    Err(_) => self.stats.install_refused += 1,
                },
                LearnDecision::Remove => {
                    if self.uninstall(&key) {
                        self.stats.removed_by_response += 1;
                    }
                }
            }
        }
        (self.key, self.params) = (key, params);
    }

    /// Puts an entry in the mirrored table's original in the switch at once (a table kept by
    /// responses: no offload choice); refused when the table is full.
    fn install_now(&mut self, key: &[u64], params: &[u64]) -> Result<(), String> {
        let table = self.pipeline.mirrored_table().ok_or("the program has no mirrored table")?.to_string();
        let action = self.pipeline.learn_action().ok_or("the mirrored table has no learn action")?.to_string();
        let km: Vec<KeyMatch> = key.iter().map(|&v| KeyMatch::Exact(v)).collect();
        self.pipeline.insert(&table, &km, 0, &action, params)?;
        self.installed.insert(entry_id(0, key), (0, key.into()));
        Ok(())
    }

    /// Takes an entry out of the switch's copy of the mirrored table; false if it was not there.
    pub fn uninstall(&mut self, key: &[u64]) -> bool {
        let Some(table) = self.pipeline.mirrored_table().map(str::to_string) else { return false };
        let km: Vec<KeyMatch> = key.iter().map(|&v| KeyMatch::Exact(v)).collect();
        let id = entry_id(0, key);
        self.offload.forget(id);
        self.installed.remove(&id);
        self.pipeline.remove(&table, &km)
    }

    /// After a response: keeps its entry (of whichever mirrored table learns it) if the
    /// controller is waiting for it.
    fn learn(&mut self) {
        if self.learning.is_empty() {
            return;
        }
        for rank in 0..self.pipeline.mirrored_count() {
            if !self.pipeline.learned_at(rank, &mut self.key, &mut self.params) {
                continue;
            }
            let id = entry_id(rank, &self.key);
            if let Some(slot @ None) = self.learning.get_mut(&id) {
                *slot = Some((rank, self.key.as_slice().into(), self.params.as_slice().into()));
            }
        }
    }

    /// The port a frame the switch keeps leaves by: `port` if an action set it, else the
    /// route of its destination (its Ethernet addresses rewritten).
    fn egress(&mut self, p: &mut Packet, port: Option<u16>) -> Result<u16, DropReason> {
        if let Some(port) = port {
            if port > self.cfg.ports {
                return Err(DropReason::BadPort);
            }
            if self.is_server_port(port) {
                return Err(DropReason::EgressToServer);
            }
            return Ok(port);
        }
        let f = p.data_mut();
        if f.len() < 34 || f[12..14] != [0x08, 0x00] {
            return Err(DropReason::NotIpv4);
        }
        let dst = Ipv4Addr::new(f[30], f[31], f[32], f[33]);
        let Some(r) = self.routes.lookup(dst).map(|i| self.cfg.routes[i as usize]) else {
            return Err(DropReason::NoRoute);
        };
        f[0..6].copy_from_slice(&r.mac);
        f[6..12].copy_from_slice(&self.cfg.mac);
        Ok(r.port)
    }

    /// Answers an ARP request for the switch's address, in place.
    fn arp(&mut self, in_port: u16, f: &mut [u8]) -> Result<u16, DropReason> {
        // htype 1, ptype IPv4, hlen 6, plen 4, op 1 (request), target the switch.
        let ours = f.len() >= 42 && f[14..22] == [0, 1, 8, 0, 6, 4, 0, 1] && f[38..42] == self.cfg.ip.octets();
        if !ours {
            return Err(DropReason::ArpNotOurs);
        }
        let mut sha = [0u8; 6];
        sha.copy_from_slice(&f[22..28]);
        let mut spa = [0u8; 4];
        spa.copy_from_slice(&f[28..32]);
        f[0..6].copy_from_slice(&sha);
        f[6..12].copy_from_slice(&self.cfg.mac);
        f[21] = 2;
        f[22..28].copy_from_slice(&self.cfg.mac);
        f[28..32].copy_from_slice(&self.cfg.ip.octets());
        f[32..38].copy_from_slice(&sha);
        f[38..42].copy_from_slice(&spa);
        self.stats.arp_replies += 1;
        Ok(in_port)
    }

    /// The controller's interval: the offload's choice applied to the mirrored table
    /// (evictions first, then installs of the entries learned; a candidate whose entry was not
    /// learned is not installed and is counted).
    pub fn interval(&mut self) -> IntervalReport {
        if self.pipeline.installs_by_response() {
            // Responses keep the table: no entry moves by the offload's choice.
            return IntervalReport::default();
        }
        let mut report = self.offload.interval();
        if self.pipeline.mirrored_count() == 0 {
            return report;
        }
        // Each mirrored table's name and learn action, by rank.
        let tables: Vec<(String, String)> = (0..self.pipeline.mirrored_count())
            .map(|r| {
                let t = self.pipeline.mirrored_table_at(r).unwrap_or_default().to_string();
                (t, self.pipeline.learn_action_at(r).unwrap_or_default().to_string())
            })
            .collect();
        for id in &report.evicted_flows {
            if let Some((rank, k)) = self.installed.remove(id) {
                let key: Vec<KeyMatch> = k.iter().map(|&v| KeyMatch::Exact(v)).collect();
                self.pipeline.remove(&tables[rank].0, &key);
            }
        }
        let mut failed = Vec::new();
        for &id in &report.installed_flows {
            match self.learning.get(&id) {
                Some(Some((rank, k, params))) => {
                    let key: Vec<KeyMatch> = k.iter().map(|&v| KeyMatch::Exact(v)).collect();
                    let (table, action) = &tables[*rank];
                    match self.pipeline.insert(table, &key, 0, action, params) {
                        Ok(()) => {
                            self.installed.insert(id, (*rank, k.clone()));
                        }
                        Err(_) => failed.push(id),
                    }
                }
                _ => failed.push(id),
            }
        }
        for id in failed {
            self.offload.forget(id);
            self.stats.unlearned += 1;
            report.installed -= 1;
            report.installed_flows.retain(|&f| f != id);
        }
        // Candidates not chosen are learned again if they come back.
        self.learning.clear();
        report
    }

    /// Installs an entry of the mirrored table in the switch's original table directly (the
    /// ideal choice in benchmarks, or an operator's pin): counted by the offload as its own.
    pub fn install(&mut self, key: &[u64], params: &[u64]) -> Result<(), String> {
        let table = self.pipeline.mirrored_table().ok_or("the program has no mirrored table")?.to_string();
        let action = self.pipeline.learn_action().ok_or("the mirrored table has no learn action")?.to_string();
        let id = entry_id(0, key);
        if !self.offload.adopt(id) {
            return Err(format!("the original table is full ({} entries)", self.offload.entries()));
        }
        let km: Vec<KeyMatch> = key.iter().map(|&v| KeyMatch::Exact(v)).collect();
        if let Err(e) = self.pipeline.insert(&table, &km, 0, &action, params) {
            self.offload.forget(id);
            return Err(e);
        }
        self.installed.insert(id, (0, key.into()));
        Ok(())
    }

    /// The first mirrored table's entries in the switch's original table: key, the learn
    /// action's parameters, and the entry's hits this interval (the controller's hit counters).
    pub fn original_entries(&self) -> Vec<(Vec<u64>, Vec<u64>, u64)> {
        self.original_entries_at(0)
    }

    /// As [`original_entries`](Self::original_entries), for the mirrored table of `rank`.
    pub fn original_entries_at(&self, rank: usize) -> Vec<(Vec<u64>, Vec<u64>, u64)> {
        let Some(table) = self.pipeline.mirrored_table_at(rank) else { return Vec::new() };
        let mut out: Vec<(Vec<u64>, Vec<u64>, u64)> = self
            .pipeline
            .entries(table)
            .unwrap_or_default()
            .into_iter()
            .map(|(key, _, _, params)| {
                let k: Vec<u64> = key.iter().map(|m| if let KeyMatch::Exact(v) = m { *v } else { 0 }).collect();
                let hits = self.offload.hits(entry_id(rank, &k)).unwrap_or(0);
                (k, params, hits)
            })
            .collect();
        out.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
        out
    }

    /// Where the mirrored table's entry of `key` lives, as the controller knows it: in the
    /// switch's original table, and so also in the servers' mirror (`Both`: the mirror is
    /// never emptied, so a move either way is make-before-break), or in the mirror alone.
    pub fn location(&self, key: &[u64]) -> crate::mirror::Location {
        if self.installed.contains_key(&entry_id(0, key)) {
            crate::mirror::Location::Both
        } else {
            crate::mirror::Location::Mirror
        }
    }

    /// A reload with a new program: becomes `fresh` (a switch built from the new configuration,
    /// off the data path), keeping the server group — its versions, filters, pins and busy
    /// marks — the counters and the request ids, so no flow changes server; the mirrored
    /// entries are learned again from the servers' answers.
    pub fn replace_with(&mut self, mut fresh: Switch) {
        std::mem::swap(&mut fresh.selector, &mut self.selector);
        fresh.stats = std::mem::take(&mut self.stats);
        fresh.next_request = self.next_request;
        *self = fresh;
    }

    /// A reload of the routes alone: takes `fresh`'s (built off the data path), keeping
    /// everything else.
    pub fn take_routes(&mut self, fresh: &mut Switch) {
        std::mem::swap(&mut self.routes, &mut fresh.routes);
        self.cfg.routes = std::mem::take(&mut fresh.cfg.routes);
    }

    /// A membership change (§III-D): the new group of `members`, with the servers' live
    /// flows (⟨flow, server⟩) to pin the ones that would lose their server.
    pub fn change_group(&mut self, members: &[ServerId], live: &[(FlowId, ServerId)]) -> Result<u16, SwitchError> {
        if let Some(m) = members.iter().find(|&&m| usize::from(m) >= self.cfg.servers.len()) {
            return Err(SwitchError::Config(format!(
                "member {m}: no such server ({} servers)",
                self.cfg.servers.len()
            )));
        }
        Ok(self.selector.change(members, live)?)
    }

    /// Fails `dead` over to `buddy` (§VI): its buckets and pins go to the buddy.
    pub fn fail_over(&mut self, dead: ServerId, buddy: ServerId) -> Result<(), SwitchError> {
        Ok(self.selector.fail_over(dead, buddy)?)
    }

    /// Flows that ended (servers' reports): their pins go.
    pub fn unpin(&mut self, ended: &[FlowId]) {
        self.selector.unpin(ended);
    }
}

fn be(b: &[u8]) -> u64 {
    b.iter().fold(0u64, |a, &x| (a << 8) | u64::from(x))
}

fn program_drop(why: &str) -> DropReason {
    match why {
        "malformed" => DropReason::Malformed,
        "response_length" => DropReason::ResponseLength,
        _ => DropReason::DroppedByProgram,
    }
}
