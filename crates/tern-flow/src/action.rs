//! Action units: the seven action types of AccelSDP Table 1 and the action sets rules carry.
//!
//! | paper  | here                     | text form                                   |
//! |--------|--------------------------|---------------------------------------------|
//! | SUB    | [`Action::DecTtl`]       | `dec_ttl`                                   |
//! | DROP   | [`Action::Drop`]         | `drop`                                      |
//! | SFD    | [`Action::SetField`]     | `set_field:eth_dst=02:00:00:00:00:01`, ...  |
//! | CAL    | [`Action::Checksum`]     | `checksum`                                  |
//! | INSERT | [`Action::PushVlan`]     | `push_vlan:100` or `push_vlan:100:5` (pcp)  |
//! | DEL    | [`Action::PopVlan`]      | `pop_vlan`                                  |
//! | OUTP   | [`Action::Output`]       | `output:1`                                  |
//!
//! An action set is a comma-separated list, run in order. Set-field rewrites keep TCP, UDP and
//! ICMPv6 checksums correct as they go (RFC 1624 incremental updates over the pseudo-header and
//! ports); the IPv4 header checksum is recomputed by `checksum` (CAL), as in the paper, and
//! [`ActionSet::warnings`] points out a set that changes the IPv4 header without it.
//!
//! ```
//! use tern_flow::action::ActionSet;
//! let a: ActionSet = "set_field:eth_dst=02:00:00:00:00:02,dec_ttl,push_vlan:100,checksum,output:1".parse().unwrap();
//! assert_eq!(a.to_string(), "set_field:eth_dst=02:00:00:00:00:02,dec_ttl,push_vlan:100,checksum,output:1");
//! assert_eq!(a.operand_bits(), 48 + 16 + 8);
//! ```

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};
use std::str::FromStr;
use std::sync::Arc;

use tern_io::Packet;
use tern_wire::frame::{self, Common4, FrameInfo, L3, MAX_VLANS, TPID_8021Q, VLAN_LEN};

/// A field `set_field` can write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SetField {
    /// Ethernet destination.
    EthDst([u8; 6]),
    /// Ethernet source.
    EthSrc([u8; 6]),
    /// IPv4 source.
    Ipv4Src(Ipv4Addr),
    /// IPv4 destination.
    Ipv4Dst(Ipv4Addr),
    /// IPv6 source.
    Ipv6Src(Ipv6Addr),
    /// IPv6 destination.
    Ipv6Dst(Ipv6Addr),
    /// TCP / UDP source port.
    TpSrc(u16),
    /// TCP / UDP destination port.
    TpDst(u16),
    /// DSCP (6 bits).
    Dscp(u8),
    /// VLAN id of the outer tag (12 bits).
    VlanVid(u16),
}

impl SetField {
    /// The field's name in the text form.
    pub fn name(&self) -> &'static str {
        match self {
            SetField::EthDst(_) => "eth_dst",
            SetField::EthSrc(_) => "eth_src",
            SetField::Ipv4Src(_) => "ipv4_src",
            SetField::Ipv4Dst(_) => "ipv4_dst",
            SetField::Ipv6Src(_) => "ipv6_src",
            SetField::Ipv6Dst(_) => "ipv6_dst",
            SetField::TpSrc(_) => "tp_src",
            SetField::TpDst(_) => "tp_dst",
            SetField::Dscp(_) => "dscp",
            SetField::VlanVid(_) => "vlan_vid",
        }
    }

    /// Bits of the value.
    pub fn value_bits(&self) -> u32 {
        match self {
            SetField::EthDst(_) | SetField::EthSrc(_) => 48,
            SetField::Ipv4Src(_) | SetField::Ipv4Dst(_) => 32,
            SetField::Ipv6Src(_) | SetField::Ipv6Dst(_) => 128,
            SetField::TpSrc(_) | SetField::TpDst(_) => 16,
            SetField::Dscp(_) => 6,
            SetField::VlanVid(_) => 12,
        }
    }

    /// The network layer the field belongs to, if it needs one.
    pub fn needs_l3(&self) -> Option<L3> {
        match self {
            SetField::Ipv4Src(_) | SetField::Ipv4Dst(_) => Some(L3::Ipv4),
            SetField::Ipv6Src(_) | SetField::Ipv6Dst(_) => Some(L3::Ipv6),
            _ => None,
        }
    }
}

/// One action.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Action {
    /// SUB: decrement the IPv4 TTL or IPv6 hop limit. A packet whose TTL would reach 0 goes
    /// to the host (the slow path) instead, as a router sends it to its control plane.
    DecTtl,
    /// DROP.
    Drop,
    /// SFD: set a header field.
    SetField(SetField),
    /// CAL: recompute the IPv4 header checksum.
    Checksum,
    /// INSERT: push an 802.1Q tag with this TCI. A frame that already carries
    /// [`MAX_VLANS`] tags is dropped instead (a third tag would make a frame the parser refuses).
    PushVlan {
        /// Tag control information (PCP 3 bits, DEI 1, VID 12).
        tci: u16,
    },
    /// DEL: pop the outer VLAN tag.
    PopVlan,
    /// OUTP: forward to a port.
    Output(u16),
}

impl Action {
    /// The paper's name of the action type (Table 1).
    pub fn paper_name(&self) -> &'static str {
        match self {
            Action::DecTtl => "SUB",
            Action::Drop => "DROP",
            Action::SetField(_) => "SFD",
            Action::Checksum => "CAL",
            Action::PushVlan { .. } => "INSERT",
            Action::PopVlan => "DEL",
            Action::Output(_) => "OUTP",
        }
    }

    /// Operand bits the action RAM stores for it.
    pub fn operand_bits(&self) -> u32 {
        match self {
            Action::SetField(f) => f.value_bits(),
            Action::PushVlan { .. } => 16,
            Action::Output(_) => 8,
            Action::DecTtl | Action::Drop | Action::Checksum | Action::PopVlan => 0,
        }
    }
}

fn fmt_mac(m: &[u8; 6], f: &mut fmt::Formatter<'_>) -> fmt::Result {
    write!(f, "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}", m[0], m[1], m[2], m[3], m[4], m[5])
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::DecTtl => f.write_str("dec_ttl"),
            Action::Drop => f.write_str("drop"),
            Action::Checksum => f.write_str("checksum"),
            Action::PopVlan => f.write_str("pop_vlan"),
            Action::Output(p) => write!(f, "output:{p}"),
            Action::PushVlan { tci } => {
                let (vid, pcp) = (tci & 0x0fff, tci >> 13);
                if pcp == 0 { write!(f, "push_vlan:{vid}") } else { write!(f, "push_vlan:{vid}:{pcp}") }
            }
            Action::SetField(s) => {
                write!(f, "set_field:{}=", s.name())?;
                match s {
                    SetField::EthDst(m) | SetField::EthSrc(m) => fmt_mac(m, f),
                    SetField::Ipv4Src(a) | SetField::Ipv4Dst(a) => write!(f, "{a}"),
                    SetField::Ipv6Src(a) | SetField::Ipv6Dst(a) => write!(f, "{a}"),
                    SetField::TpSrc(p) | SetField::TpDst(p) => write!(f, "{p}"),
                    SetField::Dscp(d) => write!(f, "{d}"),
                    SetField::VlanVid(v) => write!(f, "{v}"),
                }
            }
        }
    }
}

pub use tern_wire::frame::parse_mac;

fn parse_num<T: FromStr>(s: &str, what: &str) -> Result<T, String> {
    s.parse().map_err(|_| format!("`{s}` is not a valid {what}"))
}

impl FromStr for Action {
    type Err = String;
    fn from_str(s: &str) -> Result<Action, String> {
        let s = s.trim();
        let (name, arg) = match s.split_once(':') {
            Some((n, a)) => (n, Some(a)),
            None => (s, None),
        };
        let need = || arg.ok_or_else(|| format!("`{name}` needs an argument (`{name}:...`)"));
        let none = |a: Option<&str>| match a {
            Some(_) => Err(format!("`{name}` takes no argument")),
            None => Ok(()),
        };
        Ok(match name {
            "dec_ttl" => none(arg).map(|_| Action::DecTtl)?,
            "drop" => none(arg).map(|_| Action::Drop)?,
            "checksum" => none(arg).map(|_| Action::Checksum)?,
            "pop_vlan" => none(arg).map(|_| Action::PopVlan)?,
            "output" => Action::Output(parse_num(need()?, "port number (0..=65535)")?),
            "push_vlan" => {
                let a = need()?;
                let (vid, pcp) = match a.split_once(':') {
                    Some((v, p)) => (v, Some(p)),
                    None => (a, None),
                };
                let vid: u16 = parse_num(vid, "VLAN id")?;
                if vid > 4095 {
                    return Err(format!("VLAN id {vid} is above 4095"));
                }
                let pcp: u16 = match pcp {
                    Some(p) => parse_num(p, "VLAN priority (0..=7)")?,
                    None => 0,
                };
                if pcp > 7 {
                    return Err(format!("VLAN priority {pcp} is above 7"));
                }
                Action::PushVlan { tci: (pcp << 13) | vid }
            }
            "set_field" => {
                let a = need()?;
                let Some((field, value)) = a.split_once('=') else {
                    return Err(format!("`set_field:{a}` needs `FIELD=VALUE`"));
                };
                Action::SetField(match field {
                    "eth_dst" => SetField::EthDst(parse_mac(value)?),
                    "eth_src" => SetField::EthSrc(parse_mac(value)?),
                    "ipv4_src" => SetField::Ipv4Src(parse_num(value, "IPv4 address")?),
                    "ipv4_dst" => SetField::Ipv4Dst(parse_num(value, "IPv4 address")?),
                    "ipv6_src" => SetField::Ipv6Src(parse_num(value, "IPv6 address")?),
                    "ipv6_dst" => SetField::Ipv6Dst(parse_num(value, "IPv6 address")?),
                    "tp_src" => SetField::TpSrc(parse_num(value, "port")?),
                    "tp_dst" => SetField::TpDst(parse_num(value, "port")?),
                    "dscp" => {
                        let d: u8 = parse_num(value, "DSCP (0..=63)")?;
                        if d > 63 {
                            return Err(format!("DSCP {d} is above 63"));
                        }
                        SetField::Dscp(d)
                    }
                    "vlan_vid" => {
                        let v: u16 = parse_num(value, "VLAN id")?;
                        if v > 4095 {
                            return Err(format!("VLAN id {v} is above 4095"));
                        }
                        SetField::VlanVid(v)
                    }
                    other => {
                        return Err(format!(
                            "unknown field `{other}` (eth_dst, eth_src, ipv4_src, ipv4_dst, ipv6_src, ipv6_dst, tp_src, tp_dst, dscp, vlan_vid)"
                        ));
                    }
                })
            }
            other => {
                return Err(format!(
                    "unknown action `{other}` (dec_ttl, drop, set_field, checksum, push_vlan, pop_vlan, output)"
                ));
            }
        })
    }
}

/// Most actions in one set.
pub const MAX_ACTIONS: usize = 16;

/// An ordered list of actions: what a rule does to the packets it matches.
///
/// Cloning is cheap (the list is shared), so a rule the slow path installs shares its next
/// hop's set.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
#[repr(C)]
pub struct ActionSet {
    /// The set compiled to one header rewrite, where it has that shape. First, for the fast
    /// path (see [`crate::ofu::Entry`]).
    rewrite: Option<Rewrite>,
    actions: Arc<[Action]>,
}

/// An action set compiled to one header rewrite: set MACs, push a VLAN tag, decrement the TTL
/// with the IPv4 checksum kept right, output — the shape of every rule the slow path installs
/// (the paper's action set). The action units run it in one step instead of one action at a
/// time; [`execute`] falls back to the action-by-action interpreter ([`interpret`], its twin)
/// for every other set and whenever a packet is out of the common case (TTL expiring, no
/// headroom, not IP).
///
/// The fields the fast path reads come first (see [`crate::ofu::Entry`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(C)]
struct Rewrite {
    /// The paper's set: both MACs, a tag pushed, the TTL decremented with the checksum after
    /// it, output (the fast path's one check). It repeats `l2` and `output`, so the fast path
    /// finds all it reads of a set in one place at the front.
    paper: Option<PaperRewrite>,
    output: Option<u16>,
    dec_ttl: bool,
    /// `checksum` runs after the last header change of IPv4 (else it is left as it ends up).
    checksum_last: bool,
    /// `checksum` runs somewhere (without a TTL change it canonicalizes the field).
    checksum_any: bool,
    push_tci: Option<u16>,
    /// Both MACs set: the Ethernet header as written, destination, source, then the pushed
    /// tag (TPID, TCI) when there is one.
    l2: Option<[u8; 16]>,
    eth_dst: Option<[u8; 6]>,
    eth_src: Option<[u8; 6]>,
}

/// What the fast path needs of the paper's set (see [`Rewrite`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(C)]
struct PaperRewrite {
    /// The new Ethernet header with its tag: destination, source, TPID, TCI.
    l2: [u8; 16],
    port: u16,
}

impl Rewrite {
    fn compile(actions: &[Action]) -> Option<Rewrite> {
        let mut r = Rewrite {
            l2: None,
            eth_dst: None,
            eth_src: None,
            push_tci: None,
            dec_ttl: false,
            checksum_last: false,
            checksum_any: false,
            output: None,
            paper: None,
        };
        for a in actions {
            match *a {
                Action::SetField(SetField::EthDst(m)) => r.eth_dst = Some(m),
                Action::SetField(SetField::EthSrc(m)) => r.eth_src = Some(m),
                Action::PushVlan { tci } if r.push_tci.is_none() => r.push_tci = Some(tci),
                Action::DecTtl if !r.dec_ttl => {
                    r.dec_ttl = true;
                    r.checksum_last = false;
                }
                Action::Checksum => {
                    r.checksum_last = true;
                    r.checksum_any = true;
                }
                Action::Output(p) => r.output = Some(p),
                _ => return None,
            }
        }
        // `checksum` before `dec_ttl` only (a stale checksum after it): left to the interpreter.
        if r.dec_ttl && r.checksum_any && !r.checksum_last {
            return None;
        }
        if let (Some(dst), Some(src)) = (r.eth_dst, r.eth_src) {
            let mut l2 = [0u8; 16];
            l2[0..6].copy_from_slice(&dst);
            l2[6..12].copy_from_slice(&src);
            l2[12..14].copy_from_slice(&TPID_8021Q.to_be_bytes());
            l2[14..16].copy_from_slice(&r.push_tci.unwrap_or(0).to_be_bytes());
            r.l2 = Some(l2);
        }
        if let (Some(l2), Some(_), true, true, Some(port)) = (r.l2, r.push_tci, r.dec_ttl, r.checksum_any, r.output) {
            r.paper = Some(PaperRewrite { l2, port });
        }
        Some(r)
    }
}

impl ActionSet {
    /// A set from actions; at most [`MAX_ACTIONS`].
    pub fn new(actions: Vec<Action>) -> Result<ActionSet, String> {
        if actions.len() > MAX_ACTIONS {
            return Err(format!("{} actions in one set, at most {MAX_ACTIONS}", actions.len()));
        }
        let rewrite = Rewrite::compile(&actions);
        Ok(ActionSet { actions: actions.into(), rewrite })
    }

    /// The actions.
    pub fn actions(&self) -> &[Action] {
        &self.actions
    }

    /// Whether the action units run the set as one compiled header rewrite (see [`execute`]).
    pub fn is_compiled(&self) -> bool {
        self.rewrite.is_some()
    }

    /// The port a compiled set outputs to (the one [`rewrite_common4`] takes packets to).
    #[inline]
    pub fn compiled_output(&self) -> Option<u16> {
        self.rewrite.as_ref()?.output
    }

    /// Operand bits the set needs in the action RAM (the type fields are not counted: the
    /// paper does not give its layout).
    pub fn operand_bits(&self) -> u32 {
        self.actions.iter().map(Action::operand_bits).sum()
    }

    /// The output port, if the set forwards.
    pub fn output(&self) -> Option<u16> {
        self.actions.iter().rev().find_map(|a| if let Action::Output(p) = a { Some(*p) } else { None })
    }

    /// Things that are allowed but probably wrong: the IPv4 header changed with no `checksum`
    /// after it, actions after `drop`, fields of the other IP version (given the table's).
    pub fn warnings(&self, l3: Option<L3>) -> Vec<String> {
        let mut w = Vec::new();
        let mut dirty_v4 = false;
        for (i, a) in self.actions.iter().enumerate() {
            match a {
                Action::DecTtl | Action::SetField(SetField::Ipv4Src(_) | SetField::Ipv4Dst(_) | SetField::Dscp(_)) => {
                    dirty_v4 = l3 != Some(L3::Ipv6)
                }
                Action::Checksum => dirty_v4 = false,
                Action::Drop if i + 1 < self.actions.len() => w.push("actions after `drop` never run".to_string()),
                _ => {}
            }
            if let (Action::SetField(f), Some(l3)) = (a, l3)
                && let Some(need) = f.needs_l3()
                && need != l3
            {
                w.push(format!("`{a}` never applies to {l3:?} packets"));
            }
        }
        if dirty_v4 {
            w.push("the IPv4 header changes but no `checksum` follows: its header checksum will be wrong".to_string());
        }
        w
    }
}

impl fmt::Display for ActionSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.actions.is_empty() {
            return f.write_str("(none)");
        }
        for (i, a) in self.actions.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{a}")?;
        }
        Ok(())
    }
}

impl FromStr for ActionSet {
    type Err = String;
    /// Comma-separated actions; `push_vlan:VID:PCP` keeps its colon.
    fn from_str(s: &str) -> Result<ActionSet, String> {
        let s = s.trim();
        if s.is_empty() || s == "(none)" {
            return Ok(ActionSet::default());
        }
        let actions = s.split(',').map(str::parse).collect::<Result<Vec<Action>, String>>()?;
        ActionSet::new(actions)
    }
}

/// What happens to a packet after its actions (the paper's `State_info`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Send up to the host (the slow path): no rule decided, or the actions ask for it.
    Host,
    /// Forward on this port.
    Output(u16),
    /// Drop, and why.
    Drop(ActionDrop),
}

/// Why the action units dropped a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ActionDrop {
    /// The set said `drop`.
    Drop,
    /// `push_vlan` found no room in the buffer.
    NoRoomForVlan,
    /// `push_vlan` on a frame that already carries [`MAX_VLANS`] tags (the frame would no
    /// longer parse, here or at the next switch).
    TooManyVlans,
}

/// Runs an action set on a packet whose headers `info` describes (and keeps up to date): `info`
/// is what [`FrameInfo::parse`] returned for the packet (so an IPv4 header checksum is known to
/// be right). Returns the verdict. Never panics: an action that does not apply to the packet (a
/// TCP port on ICMP, a VLAN id on an untagged frame) changes nothing.
///
/// A compiled set runs as one rewrite; the result (bytes, `info`, verdict) is the one
/// [`interpret`] gives, which a property test checks.
#[inline]
pub fn execute(actions: &ActionSet, pkt: &mut Packet, info: &mut FrameInfo) -> Verdict {
    if let Some(r) = &actions.rewrite
        && let Some(v) = rewrite(r, pkt, info)
    {
        return v;
    }
    interpret(actions, pkt, info)
}

/// The compiled rewrite, or `None` (nothing changed) when the packet is out of its common case.
#[inline]
fn rewrite(r: &Rewrite, pkt: &mut Packet, info: &mut FrameInfo) -> Option<Verdict> {
    let (ttl_at, v4) = match info.l3 {
        L3::Ipv4 => (usize::from(info.l3_off) + 8, true),
        L3::Ipv6 => (usize::from(info.l3_off) + 7, false),
        L3::Other => return None,
    };
    // A push past the tag limit: the interpreter drops it.
    if r.push_tci.is_some() && usize::from(info.vlans) >= MAX_VLANS {
        return None;
    }
    if !rewrite_bytes(r, pkt, ttl_at, v4, info.ttl) {
        return None;
    }
    if let Some(tci) = r.push_tci {
        note_pushed_tag(info, tci);
    }
    if r.dec_ttl {
        info.ttl -= 1;
    }
    Some(r.output.map_or(Verdict::Host, Verdict::Output))
}

/// The fast path's action units for a [`Common4`] frame (untagged, IPv4 header at
/// [`Common4::L3_OFF`], TTL `ttl`): runs a compiled set that outputs to `port` (see
/// [`ActionSet::compiled_output`]) and returns true. Returns false, the packet untouched, where
/// [`execute`] would do something else (a set that is not compiled or outputs elsewhere, the
/// TTL expiring, no room for the tag). Where it returns true, the bytes are those `execute`
/// writes (a property test checks it).
#[inline(always)]
pub fn rewrite_common4(actions: &ActionSet, pkt: &mut Packet, ttl: u8, port: u16) -> bool {
    let Some(r) = actions.rewrite.as_ref() else { return false };
    if let Some(paper) = &r.paper {
        // The paper's set: the new Ethernet header with its tag, then the IPv4 header, at fixed
        // offsets in one bounds-checked chunk.
        if (paper.port != port) | (ttl <= 1) {
            return false;
        }
        const TTL: usize = Common4::L3_OFF + VLAN_LEN + 8;
        let Some(d) = pkt.push_front_chunk::<{ TTL + 4 }>(VLAN_LEN) else { return false };
        d[..16].copy_from_slice(&paper.l2);
        // `write_ttl`'s work for a set known to decrement the TTL and fix the checksum.
        d[TTL] = ttl - 1;
        let sum = frame::checksum_field_ttl_dec([d[TTL + 2], d[TTL + 3]]);
        d[TTL + 2..].copy_from_slice(&sum);
        return true;
    }
    r.output == Some(port) && rewrite_bytes(r, pkt, Common4::L3_OFF + 8, true, ttl)
}

/// A checksum field recomputed over a header that did not change: the same, except that a
/// 0xffff field (the other form of a zero sum) becomes 0.
#[inline(always)]
fn canonical_zero(sum: u16) -> u16 {
    if sum == 0xffff { 0 } else { sum }
}

/// The bytes of a compiled rewrite for a frame whose TTL (or hop limit) byte is at `ttl_at`,
/// in an IPv4 header when `v4`. Returns false, the packet untouched, when the TTL would
/// expire or a tag push finds no room.
#[inline(always)]
fn rewrite_bytes(r: &Rewrite, pkt: &mut Packet, ttl_at: usize, v4: bool, ttl: u8) -> bool {
    if r.dec_ttl && ttl <= 1 {
        return false;
    }
    let grow = if r.push_tci.is_some() { VLAN_LEN } else { 0 };
    if grow > 0 && !pkt.push_front(grow) {
        return false;
    }
    let d = pkt.data_mut();
    match (&r.l2, r.push_tci) {
        // Both MACs set: the new header in one write (with the tag, when one is pushed).
        (Some(l2), Some(_)) => d[..16].copy_from_slice(l2),
        (Some(l2), None) => d[..12].copy_from_slice(&l2[..12]),
        // Else move the old MACs with the tag push and overwrite those set.
        (None, tci) => {
            if grow > 0 {
                d.copy_within(grow..grow + 12, 0);
            }
            if let Some(m) = r.eth_dst {
                d[0..6].copy_from_slice(&m);
            }
            if let Some(m) = r.eth_src {
                d[6..12].copy_from_slice(&m);
            }
            if let Some(tci) = tci {
                write_tag(d, tci);
            }
        }
    }
    write_ttl(r, d, ttl_at + grow, v4, ttl);
    true
}

/// The network-header part of a compiled rewrite: the TTL (or hop limit, `ttl`) at `ttl_at`
/// and, in an IPv4 header (`v4`), the header checksum after it.
#[inline(always)]
fn write_ttl(r: &Rewrite, d: &mut [u8], ttl_at: usize, v4: bool, ttl: u8) {
    if v4 && r.checksum_any {
        // The header checksum was right (the parser checked it), so updating it for the TTL
        // word (RFC 1624, eqn. 3) gives what recomputing it would; without a TTL change,
        // recomputing only turns a 0xffff field into 0.
        let at = ttl_at + 2;
        let field = [d[at], d[at + 1]];
        let field = if r.dec_ttl {
            frame::checksum_field_ttl_dec(field)
        } else {
            canonical_zero(u16::from_be_bytes(field)).to_be_bytes()
        };
        d[at..at + 2].copy_from_slice(&field);
    }
    if r.dec_ttl {
        d[ttl_at] = ttl - 1;
    }
}

/// Runs the actions one at a time, in order: the action units' reference behaviour.
pub fn interpret(actions: &ActionSet, pkt: &mut Packet, info: &mut FrameInfo) -> Verdict {
    let mut verdict = Verdict::Host;
    for a in actions.actions() {
        match *a {
            Action::Drop => return Verdict::Drop(ActionDrop::Drop),
            Action::Output(p) => verdict = Verdict::Output(p),
            Action::DecTtl => {
                let at = match info.l3 {
                    L3::Ipv4 => usize::from(info.l3_off) + 8,
                    L3::Ipv6 => usize::from(info.l3_off) + 7,
                    L3::Other => continue,
                };
                if info.ttl <= 1 {
                    return Verdict::Host;
                }
                info.ttl -= 1;
                pkt.data_mut()[at] = info.ttl;
            }
            Action::Checksum => {
                if info.l3 == L3::Ipv4 {
                    frame::ipv4_fill_checksum(pkt.data_mut(), usize::from(info.l3_off));
                }
            }
            Action::SetField(f) => set_field(f, pkt.data_mut(), info),
            Action::PushVlan { tci } => {
                if usize::from(info.vlans) >= MAX_VLANS {
                    return Verdict::Drop(ActionDrop::TooManyVlans);
                }
                if !pkt.push_front(VLAN_LEN) {
                    return Verdict::Drop(ActionDrop::NoRoomForVlan);
                }
                let d = pkt.data_mut();
                d.copy_within(VLAN_LEN..VLAN_LEN + 12, 0);
                write_tag(d, tci);
                note_pushed_tag(info, tci);
            }
            Action::PopVlan => {
                if info.vlans == 0 {
                    continue;
                }
                let d = pkt.data_mut();
                d.copy_within(0..12, VLAN_LEN);
                pkt.pull_front(VLAN_LEN);
                info.vlans -= 1;
                if info.vlans > 0 {
                    let d = pkt.data();
                    info.vlan_tci = u16::from_be_bytes([d[14], d[15]]);
                }
                shift(info, -(VLAN_LEN as i32));
            }
        }
    }
    verdict
}

/// Writes the tag of a push (the frame has grown by `VLAN_LEN` at the front and its MACs are
/// in place).
#[inline]
fn write_tag(d: &mut [u8], tci: u16) {
    d[12..14].copy_from_slice(&TPID_8021Q.to_be_bytes());
    d[14..16].copy_from_slice(&tci.to_be_bytes());
}

/// `info` after an outer VLAN tag was pushed.
#[inline]
fn note_pushed_tag(info: &mut FrameInfo, tci: u16) {
    info.vlans += 1;
    info.vlan_tci = tci;
    shift(info, VLAN_LEN as i32);
}

fn shift(info: &mut FrameInfo, by: i32) {
    let mv = |x: u16| (i32::from(x) + by) as u16;
    info.l3_off = mv(info.l3_off);
    info.ip_end = mv(info.ip_end);
    if info.has_l4 {
        info.l4_off = mv(info.l4_off);
    }
}

/// Writes `new` at `at`, adjusting the transport checksum for it.
fn write_l4_covered(d: &mut [u8], info: &FrameInfo, at: usize, new: &[u8]) {
    let mut old = [0u8; 16];
    let n = new.len();
    old[..n].copy_from_slice(&d[at..at + n]);
    d[at..at + n].copy_from_slice(new);
    if let Some(c) = info.l4_checksum_off(d) {
        frame::checksum_adjust_bytes(d, c, &old[..n], new);
    }
}

fn set_field(f: SetField, d: &mut [u8], info: &mut FrameInfo) {
    let l3 = usize::from(info.l3_off);
    match f {
        SetField::EthDst(m) => d[0..6].copy_from_slice(&m),
        SetField::EthSrc(m) => d[6..12].copy_from_slice(&m),
        SetField::Ipv4Src(a) | SetField::Ipv4Dst(a) if info.l3 == L3::Ipv4 => {
            let at = if matches!(f, SetField::Ipv4Src(_)) { l3 + 12 } else { l3 + 16 };
            write_l4_covered(d, info, at, &a.octets());
            let v = u128::from(u32::from(a));
            if at == l3 + 12 { info.src = v } else { info.dst = v }
        }
        SetField::Ipv6Src(a) | SetField::Ipv6Dst(a) if info.l3 == L3::Ipv6 => {
            let at = if matches!(f, SetField::Ipv6Src(_)) { l3 + 8 } else { l3 + 24 };
            write_l4_covered(d, info, at, &a.octets());
            let v = u128::from(a);
            if at == l3 + 8 { info.src = v } else { info.dst = v }
        }
        SetField::TpSrc(p) | SetField::TpDst(p)
            if info.has_l4 && matches!(info.proto, frame::proto::TCP | frame::proto::UDP) =>
        {
            let l4 = usize::from(info.l4_off);
            let at = if matches!(f, SetField::TpSrc(_)) { l4 } else { l4 + 2 };
            write_l4_covered(d, info, at, &p.to_be_bytes());
            if at == l4 { info.src_port = p } else { info.dst_port = p }
        }
        SetField::Dscp(v) => match info.l3 {
            L3::Ipv4 => {
                d[l3 + 1] = (v << 2) | (d[l3 + 1] & 0x3);
                info.dscp = v;
            }
            L3::Ipv6 => {
                // Traffic class straddles bytes 0 and 1: DSCP is bits 4..10 of the first word.
                let w = u16::from_be_bytes([d[l3], d[l3 + 1]]);
                let w = (w & !(0x3f << 6)) | (u16::from(v) << 6);
                d[l3..l3 + 2].copy_from_slice(&w.to_be_bytes());
                info.dscp = v;
            }
            L3::Other => {}
        },
        SetField::VlanVid(v) if info.vlans > 0 => {
            let tci = (info.vlan_tci & 0xf000) | v;
            d[14..16].copy_from_slice(&tci.to_be_bytes());
            info.vlan_tci = tci;
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What the fast path reads of a set (the rewrite up to the new Ethernet header) is in its
    /// first 32 bytes, which an entry keeps in its first cache line (see `ofu::Entry`).
    #[test]
    fn the_fast_paths_fields_come_first() {
        assert_eq!(std::mem::offset_of!(ActionSet, rewrite), 0);
        assert_eq!(std::mem::offset_of!(Rewrite, paper), 0);
        let end = std::mem::size_of::<Option<PaperRewrite>>();
        assert!(end <= 32, "{end}");
    }

    #[test]
    fn text_round_trips() {
        for s in [
            "dec_ttl",
            "drop",
            "checksum",
            "pop_vlan",
            "output:7",
            "push_vlan:100",
            "push_vlan:4095:7",
            "set_field:eth_src=0a:0b:0c:0d:0e:0f",
            "set_field:ipv4_dst=10.1.2.3",
            "set_field:ipv6_src=2001:db8::1",
            "set_field:tp_dst=443",
            "set_field:dscp=46",
            "set_field:vlan_vid=12",
        ] {
            let a: Action = s.parse().unwrap();
            assert_eq!(a.to_string(), s);
        }
    }

    #[test]
    fn errors_name_the_bad_item() {
        let e = "set_field:eth_dst=02:00".parse::<Action>().unwrap_err();
        assert!(e.contains("02:00"), "{e}");
        let e = "push_vlan:5000".parse::<Action>().unwrap_err();
        assert!(e.contains("5000"), "{e}");
        let e = "frobnicate".parse::<Action>().unwrap_err();
        assert!(e.contains("frobnicate"), "{e}");
        let e = "output".parse::<Action>().unwrap_err();
        assert!(e.contains("needs an argument"), "{e}");
        let e = "dec_ttl:3".parse::<Action>().unwrap_err();
        assert!(e.contains("no argument"), "{e}");
        let e = "set_field:mpls=3".parse::<Action>().unwrap_err();
        assert!(e.contains("mpls"), "{e}");
        let many = vec!["drop"; MAX_ACTIONS + 1].join(",");
        assert!(many.parse::<ActionSet>().unwrap_err().contains("at most"));
    }

    #[test]
    fn warnings() {
        let a: ActionSet = "dec_ttl,output:1".parse().unwrap();
        assert_eq!(a.warnings(Some(L3::Ipv4)).len(), 1);
        assert!(a.warnings(Some(L3::Ipv6)).is_empty());
        let a: ActionSet = "dec_ttl,checksum,output:1".parse().unwrap();
        assert!(a.warnings(Some(L3::Ipv4)).is_empty());
        let a: ActionSet = "set_field:ipv6_dst=::1,drop,output:1".parse().unwrap();
        let w = a.warnings(Some(L3::Ipv4));
        assert_eq!(w.len(), 2, "{w:?}");
    }
}
