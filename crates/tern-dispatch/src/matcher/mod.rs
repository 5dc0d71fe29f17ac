//! The Matcher: a rule set compiled into the skip-and-check state machine (QingNiao §4.2.1).
//!
//! Each rule becomes a path of *steps*. A step names a dispatch field, how to move within it
//! (skip a number of bytes, or skip to just after the next delimiter) and how many bytes to check
//! there; the checked bytes are the key that selects the next state, as the paper's CAM does.
//! Rules that start with the same steps share states, so the machine is a trie: a state holds
//! one *branch* per distinct step shape (the hardware allows one — see [`offload`]), each branch
//! a table from checked bytes to the next state, and a state where a rule ends carries that
//! rule's queue.
//!
//! Byte positions are taken in a field's *view*: its 2-byte TLV length followed by its value.
//! That lets `exact` be one check (length and value together), as the hardware's ByteStream sees
//! the length bytes too; patterns start 2 bytes in, at the value. A delimiter skip never stops
//! inside the length bytes.
//!
//! [`Machine::decide`] walks the machine on a first packet's TLV bytes in place. Where a rule
//! set has one shape per state (everything the hardware runs), that is a single walk with one
//! table lookup per skip-and-check. Rule sets the hardware cannot run (several shapes at one
//! state, `suffix`, `contains`) still work: the walk then also tries the other branches, in
//! precedence order, and keeps the earliest rule that matches. [`reference`](mod@reference) is the naive
//! evaluator it is tested against.
//!
//! Cost (criterion `matcher`, this machine): see `benches/matcher.rs` and the numbers in
//! `docs/rules.md`.
//!
//! ```
//! use tern_dispatch::matcher::Machine;
//! use tern_dispatch::rules::{DispatchConfig, RuleSet};
//! use tern_wire::tlv::Writer;
//! let idl = tern_idl::parse_str("kv.proto", r#"syntax = "proto3"; import "tern/qingniao.proto";
//!     message Get { string key = 1 [(tern.dispatch) = true]; }"#).unwrap();
//! let cfg: DispatchConfig = toml::from_str(r#"idl = "kv.proto"
//!     [[app]]
//!     name = "kv"
//!     id = 1
//!     requests = { Get = 1 }
//!     [[rule]]
//!     app = "kv"
//!     request = "Get"
//!     queue = 3
//!     match = { key = "...AAA.BB" }"#).unwrap();
//! let set = RuleSet::from_config(&cfg, &idl).unwrap();
//! let machine = Machine::compile(&set, 1).unwrap();
//! let mut payload = Vec::new();
//! Writer::new(&mut payload).put_bytes(1, b"FEFAAACBB");
//! assert_eq!(machine.decide(1, &payload).queue, 3);
//! payload.clear();
//! Writer::new(&mut payload).put_bytes(1, b"FEFBAACBB");
//! assert_eq!(machine.decide(1, &payload).queue, 0); // the default queue
//! ```

pub mod offload;
pub mod reference;

use std::fmt;

use hashbrown::HashMap;
use tern_wire::tlv::RECORD_HEADER_LEN;

use crate::rules::pattern::PatOp;
use crate::rules::{CondKind, Rule, RuleSet};

/// Most steps one rule may compile to (the walk recurses once per step).
pub const MAX_STEPS_PER_RULE: usize = 1024;

/// Bytes of a TLV record's length, the start of a field's view.
const LEN_BYTES: usize = 2;

/// How a step moves within its field before checking.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum SkipPart {
    /// Skip this many bytes.
    Fixed(u32),
    /// Skip to just after the next delimiter byte.
    ToDelim,
}

/// The shape of a step: everything but the bytes it checks.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum Shape {
    /// Move (skips, in order), then check `len` bytes.
    Check {
        /// Moves before the check.
        skip: Vec<SkipPart>,
        /// Bytes checked.
        len: u32,
    },
    /// Check the value's last `len` bytes (software only).
    Suffix {
        /// Bytes checked.
        len: u32,
    },
    /// The value contains `needle` (software only).
    Contains {
        /// What to find.
        needle: Vec<u8>,
    },
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Shape::Check { skip, len } => {
                let moves: Vec<String> = skip
                    .iter()
                    .map(|s| match s {
                        SkipPart::Fixed(n) => format!("skips {n}"),
                        SkipPart::ToDelim => "skips to the delimiter".to_string(),
                    })
                    .collect();
                let moves = if moves.is_empty() { "skips 0".to_string() } else { moves.join(", ") };
                write!(f, "{moves} and checks {len}")
            }
            Shape::Suffix { len } => write!(f, "checks the last {len}"),
            Shape::Contains { needle } => write!(f, "searches for {}", needle.len()),
        }
    }
}

/// One step of a rule's path.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Step {
    /// Field number.
    pub field: u8,
    /// Shape.
    pub shape: Shape,
    /// Bytes checked (empty for `Contains`).
    pub key: Vec<u8>,
}

/// A rule's steps, in order; `Err` names why the rule cannot be compiled.
pub fn steps_of(rule: &Rule) -> Result<Vec<Step>, String> {
    let mut steps = Vec::new();
    for c in &rule.conditions {
        let field = c.field;
        match &c.kind {
            CondKind::Exact(b) => {
                let Ok(n) = u16::try_from(b.len()) else {
                    return Err(format!(
                        "field `{}`: an exact value of {} bytes exceeds a field's 65535",
                        c.field_name,
                        b.len()
                    ));
                };
                let mut key = n.to_be_bytes().to_vec();
                key.extend_from_slice(b);
                steps.push(Step { field, shape: Shape::Check { skip: Vec::new(), len: key.len() as u32 }, key });
            }
            CondKind::Prefix(b) => pattern_steps(field, &[PatOp::Check(b.clone())], &mut steps),
            CondKind::Pattern(ops) => pattern_steps(field, ops, &mut steps),
            CondKind::Suffix(b) => {
                steps.push(Step { field, shape: Shape::Suffix { len: b.len() as u32 }, key: b.clone() })
            }
            CondKind::Contains(b) => {
                steps.push(Step { field, shape: Shape::Contains { needle: b.clone() }, key: Vec::new() })
            }
        }
    }
    if steps.len() > MAX_STEPS_PER_RULE {
        return Err(format!("{} skip-and-checks; a rule may have at most {MAX_STEPS_PER_RULE}", steps.len()));
    }
    Ok(steps)
}

fn pattern_steps(field: u8, ops: &[PatOp], steps: &mut Vec<Step>) {
    // The view starts with the 2 length bytes: the first move skips them. A delimiter skip
    // never stops inside them, so "skip 2, then to the delimiter" is just "to the delimiter".
    let mut skip = vec![SkipPart::Fixed(LEN_BYTES as u32)];
    let mut at_start = true;
    for op in ops {
        match op {
            PatOp::Skip(n) => match skip.last_mut() {
                Some(SkipPart::Fixed(m)) => *m += n,
                _ => skip.push(SkipPart::Fixed(*n)),
            },
            PatOp::ToDelim => {
                if at_start && skip == [SkipPart::Fixed(LEN_BYTES as u32)] {
                    skip.clear();
                }
                skip.push(SkipPart::ToDelim);
            }
            PatOp::Check(b) => {
                at_start = false;
                let moves = std::mem::take(&mut skip);
                let moves = if moves == [SkipPart::Fixed(0)] { Vec::new() } else { moves };
                steps.push(Step { field, shape: Shape::Check { skip: moves, len: b.len() as u32 }, key: b.clone() });
            }
        }
    }
}

/// A rule that could not be compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("rule \"{rule}\": {reason}")]
pub struct CompileError {
    /// The rule.
    pub rule: String,
    /// Why.
    pub reason: String,
}

/// No rule: the terminal slot of a state without one.
const NO_RULE: u32 = u32::MAX;

#[derive(Debug, Clone)]
enum Table {
    /// One key of at most 8 bytes: compare, no hashing.
    One(u64, u32),
    /// Keys of at most 8 bytes.
    Short(ShortTable),
    /// Longer keys.
    Long(HashMap<Box<[u8]>, u32>),
    /// A `contains` branch: one next state.
    Always(u32),
}

#[derive(Debug, Clone)]
struct Branch {
    slot: u8,
    /// For a check after a counted skip only (the common case): the skip; else `u32::MAX`.
    fixed_skip: u32,
    /// For a check of at most 8 bytes: the mask keeping `len` bytes of an 8-byte load.
    short_mask: u64,
    /// Bytes of that check.
    short_len: u8,
    shape: Shape,
    /// Earliest rule below this branch: a walk that already has a match at least as early skips it.
    min_rule: u32,
    table: Table,
}

#[derive(Debug, Clone)]
struct Node {
    /// Rule ending here (its index), or `NO_RULE`.
    rule: u32,
    queue: u16,
    branches: Vec<Branch>,
    /// The single path below this node, compressed (see [`Chain`]).
    chain: Option<Box<Chain>>,
}

/// A run of states with one key each and no rule ending in between, checked at once: per
/// field, one masked comparison over the bytes the run's skip-and-checks cover. (Software
/// only: the hardware walks it one skip-and-check per step.)
#[derive(Debug, Clone)]
struct Chain {
    /// The first field's comparison (held here, one load less on the walk), then the others.
    seg0: Seg,
    rest: Box<[Seg]>,
    /// The state the run leads to.
    end: u32,
    /// Earliest rule below.
    min_rule: u32,
    /// Where `end` is a leaf (it has no branch), its rule and queue: the walk stops here.
    leaf: Option<(u32, u16)>,
}

#[derive(Debug, Clone)]
struct Seg {
    slot: u8,
    /// Bytes to skip from the cursor (from the view's start when the field changes).
    skip: u32,
    /// Bytes covered.
    len: u32,
    /// (expected, mask) per 8-byte word of the covered bytes, the last word padded with mask 0;
    /// the mask has 0xFF where a byte is checked and 0 where it is skipped.
    words: Box<[(u64, u64)]>,
    /// For a run of at most [`SEG_WORDS`] words: the same, padded with mask-0 words, compared
    /// in one unrolled pass.
    short: Option<[(u64, u64); SEG_WORDS]>,
    /// The same, byte by byte, for a view that ends inside the last word.
    expected: Vec<u8>,
    mask: Vec<u8>,
}

/// Words a chain segment compares without a loop.
const SEG_WORDS: usize = 4;

/// The machine for one request type.
#[derive(Debug, Clone)]
struct Root {
    req_type: u8,
    node: u32,
    /// Field number → slot in the located-field array, `u8::MAX` if no rule reads it.
    slot_of: Box<[u8; 256]>,
    /// Fields the rules read.
    fields: u8,
}

/// The outcome of a first packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Queue (worker) the request goes to.
    pub queue: u16,
    /// Index of the rule that matched (file order), `None` for the default queue.
    pub rule: Option<u32>,
}

/// One application's compiled rules.
#[derive(Debug, Clone)]
pub struct Machine {
    app_id: u8,
    default_queue: u16,
    delimiter: u8,
    nodes: Vec<Node>,
    roots: Vec<Root>,
    /// `req_type` → index in `roots` (`u8::MAX`: no rules).
    root_of: Box<[u8; 256]>,
    /// Field number of each slot.
    slot_fields: Vec<u8>,
    /// Rule names by index, for reports.
    rule_names: Vec<(u32, String)>,
    /// The application's request types and their dispatch fields.
    types: crate::rules::RequestTypes,
}

/// Fields one request can have located at once.
const MAX_SLOTS: usize = 8;

/// (slot, shape, earliest rule below, keys with their next node).
type BuildBranch = (u8, Shape, u32, Vec<(Vec<u8>, usize)>);

#[derive(Debug, Default)]
struct BuildNode {
    rule: Option<(u32, u16)>,
    branches: Vec<BuildBranch>,
}

impl Machine {
    /// Compiles the rules of application `app_id` of a checked rule set.
    pub fn compile(set: &RuleSet, app_id: u8) -> Result<Machine, CompileError> {
        let app = set
            .app(app_id)
            .ok_or_else(|| CompileError { rule: String::new(), reason: format!("app id {app_id} is not defined") })?;
        let mut nodes: Vec<BuildNode> = Vec::new();
        let mut roots: Vec<(u8, usize, Vec<u8>)> = Vec::new();
        let mut rule_names = Vec::new();
        // Slot numbers are the machine's: slot i holds field slot_fields[i].
        let mut slot_fields: Vec<u8> = Vec::new();
        for rule in set.rules_of(app_id) {
            let steps = steps_of(rule).map_err(|reason| CompileError { rule: rule.name.clone(), reason })?;
            let idx = rule.index as u32;
            rule_names.push((idx, rule.name.clone()));
            let ri = match roots.iter().position(|r| r.0 == rule.req_type) {
                Some(i) => i,
                None => {
                    nodes.push(BuildNode::default());
                    roots.push((rule.req_type, nodes.len() - 1, Vec::new()));
                    roots.len() - 1
                }
            };
            let mut at = roots[ri].1;
            for step in steps {
                if !roots[ri].2.contains(&step.field) {
                    roots[ri].2.push(step.field);
                }
                if !slot_fields.contains(&step.field) {
                    slot_fields.push(step.field);
                }
                let slot = slot_fields.iter().position(|&f| f == step.field).unwrap_or(0) as u8;
                let bi = match nodes[at].branches.iter().position(|b| b.0 == slot && b.1 == step.shape) {
                    Some(bi) => bi,
                    None => {
                        nodes[at].branches.push((slot, step.shape.clone(), idx, Vec::new()));
                        nodes[at].branches.len() - 1
                    }
                };
                let next = match nodes[at].branches[bi].3.iter().find(|(k, _)| *k == step.key) {
                    Some(&(_, n)) => n,
                    None => {
                        nodes.push(BuildNode::default());
                        let n = nodes.len() - 1;
                        nodes[at].branches[bi].3.push((step.key.clone(), n));
                        n
                    }
                };
                at = next;
            }
            // An earlier rule with the same path wins; this one is shadowed (rules warns).
            if nodes[at].rule.is_none() {
                nodes[at].rule = Some((idx, rule.queue));
            }
        }
        if slot_fields.len() > MAX_SLOTS {
            return Err(CompileError {
                rule: String::new(),
                reason: format!("rules read more than {MAX_SLOTS} fields"),
            });
        }
        // The earliest rule ending anywhere below each node (children have larger indices).
        let mut min_below = vec![NO_RULE; nodes.len()];
        for i in (0..nodes.len()).rev() {
            let own = nodes[i].rule.map_or(NO_RULE, |r| r.0);
            min_below[i] =
                nodes[i].branches.iter().flat_map(|b| b.3.iter()).map(|&(_, c)| min_below[c]).fold(own, u32::min);
        }
        // Drop what can never win: a rule ending below an earlier rule that already matched on
        // the way down, and every key whose subtree holds only such rules. (The rules module
        // warns about them as shadowed.) Without this a walk that stops at the first terminal,
        // as the hardware's does, could pick a later rule.
        let mut stack: Vec<(usize, u32)> = roots.iter().map(|r| (r.1, NO_RULE)).collect();
        while let Some((i, above)) = stack.pop() {
            if nodes[i].rule.is_some_and(|(r, _)| r > above) {
                nodes[i].rule = None;
            }
            let best = nodes[i].rule.map_or(above, |(r, _)| r.min(above));
            for b in &mut nodes[i].branches {
                b.3.retain(|&(_, c)| min_below[c] < best);
                b.2 = b.3.iter().map(|&(_, c)| min_below[c]).min().unwrap_or(NO_RULE);
            }
            nodes[i].branches.retain(|b| !b.3.is_empty());
            stack.extend(nodes[i].branches.iter().flat_map(|b| b.3.iter()).map(|&(_, c)| (c, best)));
        }
        let nodes = nodes
            .into_iter()
            .map(|n| {
                let mut branches: Vec<Branch> = n
                    .branches
                    .into_iter()
                    .map(|(slot, shape, min_rule, keys)| {
                        let table = make_table(&shape, keys);
                        let (fixed_skip, short_mask) = match &shape {
                            Shape::Check { skip, len } if *len <= 8 => {
                                let fixed = match skip.as_slice() {
                                    [] => 0,
                                    [SkipPart::Fixed(n)] => *n,
                                    _ => u32::MAX,
                                };
                                (fixed, if *len == 8 { u64::MAX } else { (1u64 << (8 * len)) - 1 })
                            }
                            _ => (u32::MAX, 0),
                        };
                        let short_len = (short_mask.count_ones() / 8) as u8;
                        Branch { slot, fixed_skip, short_mask, short_len, shape, min_rule, table }
                    })
                    .collect();
                branches.sort_by_key(|b| b.min_rule);
                let (rule, queue) = n.rule.unwrap_or((NO_RULE, 0));
                Node { rule, queue, branches, chain: None }
            })
            .collect();
        let roots: Vec<Root> = roots
            .into_iter()
            .map(|(req_type, node, fields)| {
                let mut slot_of = Box::new([u8::MAX; 256]);
                for &f in &fields {
                    slot_of[f as usize] = slot_fields.iter().position(|&g| g == f).unwrap_or(0) as u8;
                }
                Root { req_type, node: node as u32, slot_of, fields: fields.len() as u8 }
            })
            .collect();
        let mut root_of = Box::new([u8::MAX; 256]);
        for (i, r) in roots.iter().enumerate() {
            root_of[r.req_type as usize] = i as u8;
        }
        let mut nodes: Vec<Node> = nodes;
        for i in 0..nodes.len() {
            nodes[i].chain = chain_from(&nodes, i as u32).map(Box::new);
        }
        Ok(Machine {
            app_id,
            default_queue: app.default_queue,
            delimiter: set.delimiter,
            nodes,
            roots,
            root_of,
            slot_fields,
            rule_names,
            types: app.request_types(),
        })
    }

    /// The application's request types, with the dispatch fields a first packet must lead with.
    pub fn request_types(&self) -> &crate::rules::RequestTypes {
        &self.types
    }

    /// The application.
    pub fn app_id(&self) -> u8 {
        self.app_id
    }

    /// The default queue.
    pub fn default_queue(&self) -> u16 {
        self.default_queue
    }

    /// States (trie nodes) of the machine.
    pub fn states(&self) -> usize {
        self.nodes.len()
    }

    /// Nodes reachable from the roots (dropped branches leave unreachable ones behind).
    fn reachable(&self) -> Vec<u32> {
        let mut seen = vec![false; self.nodes.len()];
        let mut stack: Vec<u32> = self.roots.iter().map(|r| r.node).collect();
        let mut out = Vec::new();
        while let Some(i) = stack.pop() {
            if std::mem::replace(&mut seen[i as usize], true) {
                continue;
            }
            out.push(i);
            for b in &self.nodes[i as usize].branches {
                b.table.push_targets(&mut stack);
            }
        }
        out
    }

    /// A rule's name by index.
    pub fn rule_name(&self, index: u32) -> Option<&str> {
        self.rule_names.iter().find(|(i, _)| *i == index).map(|(_, n)| n.as_str())
    }

    /// Decides the queue of a request of `req_type` from its first packet's payload (TLV
    /// records; pass only the bytes the dispatcher may read, e.g. up to `seg_cnt`). Never
    /// panics: malformed records end the field search, and absent fields fail their conditions.
    pub fn decide(&self, req_type: u8, payload: &[u8]) -> Decision {
        let default = Decision { queue: self.default_queue, rule: None };
        let Some(root) = self.roots.get(self.root_of[req_type as usize] as usize) else {
            return default;
        };
        let mut fields = [(0u32, 0u32); MAX_SLOTS];
        locate(payload, root, &mut fields);
        let mut best = (NO_RULE, self.default_queue);
        self.walk(root.node, payload, &fields, u8::MAX, 0, &mut best);
        if best.0 == NO_RULE { default } else { Decision { queue: best.1, rule: Some(best.0) } }
    }

    /// Depth-first walk keeping the earliest matching rule in `best`. `slot`/`pos` is the cursor:
    /// the field being read and the position in its view. The loop follows single-branch states
    /// (every hardware-shaped machine is made of them) without recursion; a state with several
    /// branches hands over to [`Machine::walk_branches`], out of line.
    #[inline(always)]
    fn walk(
        &self,
        mut node: u32,
        payload: &[u8],
        fields: &[(u32, u32); MAX_SLOTS],
        mut slot: u8,
        mut pos: usize,
        best: &mut (u32, u16),
    ) {
        loop {
            let Some(n) = self.nodes.get(node as usize) else { return };
            if n.rule < best.0 {
                *best = (n.rule, n.queue);
            }
            if let Some(c) = &n.chain {
                if c.min_rule >= best.0 {
                    return;
                }
                match run_chain(c, payload, fields, slot, pos) {
                    Some(_) if c.leaf.is_some() => {
                        if let Some(leaf) = c.leaf
                            && leaf.0 < best.0
                        {
                            *best = leaf;
                        }
                        return;
                    }
                    Some((s, p)) => {
                        node = c.end;
                        slot = s;
                        pos = p;
                        continue;
                    }
                    None => return,
                }
            }
            match n.branches.as_slice() {
                [] => return,
                // The common case (every hardware-shaped machine): one branch, no backtracking.
                [b] => {
                    if b.min_rule >= best.0 {
                        return;
                    }
                    match self.step_any(b, payload, fields, slot, pos) {
                        Some((next, p)) => {
                            node = next;
                            slot = b.slot;
                            pos = p;
                        }
                        None => return,
                    }
                }
                branches => return self.walk_branches(branches, payload, fields, slot, pos, best),
            }
        }
    }

    /// Tries each branch of a state with several, in precedence order, walking below each.
    #[inline(never)]
    fn walk_branches(
        &self,
        branches: &[Branch],
        payload: &[u8],
        fields: &[(u32, u32); MAX_SLOTS],
        slot: u8,
        pos: usize,
        best: &mut (u32, u16),
    ) {
        for b in branches {
            if b.min_rule >= best.0 {
                break; // sorted by min_rule: no later branch can do better
            }
            if let Some((next, p)) = self.step_any(b, payload, fields, slot, pos) {
                self.walk(next, payload, fields, b.slot, p, best);
            }
        }
    }

    /// Runs one branch's step from the cursor, the short form inline.
    #[inline(always)]
    fn step_any(
        &self,
        b: &Branch,
        payload: &[u8],
        fields: &[(u32, u32); MAX_SLOTS],
        slot: u8,
        pos: usize,
    ) -> Option<(u32, usize)> {
        if b.fixed_skip != u32::MAX {
            step_short(b, payload, fields, slot, pos)
        } else {
            self.step(b, payload, fields, slot, pos)
        }
    }

    /// Runs one branch's step from the cursor: the next state and position, or `None`. (Counted
    /// skips with short keys take [`step_short`].)
    #[inline(never)]
    fn step(
        &self,
        b: &Branch,
        payload: &[u8],
        fields: &[(u32, u32); MAX_SLOTS],
        slot: u8,
        pos: usize,
    ) -> Option<(u32, usize)> {
        let view = field_view(payload, fields, b.slot)?;
        let pos = if b.slot == slot { pos } else { 0 };
        match (&b.shape, &b.table) {
            (Shape::Check { skip, len }, table) => {
                let mut p = pos;
                for part in skip {
                    match part {
                        SkipPart::Fixed(n) => p += *n as usize,
                        SkipPart::ToDelim => {
                            let from = p.max(LEN_BYTES);
                            let i = view.get(from..)?.iter().position(|&c| c == self.delimiter)?;
                            p = from + i + 1;
                        }
                    }
                }
                let key = view.get(p..p + *len as usize)?;
                Some((lookup(table, key)?, p + *len as usize))
            }
            (Shape::Suffix { len }, table) => {
                let value = &view[LEN_BYTES.min(view.len())..];
                let key = value.get(value.len().checked_sub(*len as usize)?..)?;
                Some((lookup(table, key)?, view.len()))
            }
            (Shape::Contains { needle }, Table::Always(next)) => {
                let value = &view[LEN_BYTES.min(view.len())..];
                let found = needle.is_empty() || value.windows(needle.len()).any(|w| w == needle.as_slice());
                found.then_some((*next, view.len()))
            }
            (Shape::Contains { .. }, _) => None,
        }
    }
}

/// The view (length bytes and value) of the field in `slot`, or `None` if the field is absent.
#[inline(always)]
fn field_view<'a>(payload: &'a [u8], fields: &[(u32, u32); MAX_SLOTS], slot: u8) -> Option<&'a [u8]> {
    let (start, end) = *fields.get(slot as usize)?;
    if end == 0 {
        return None;
    }
    payload.get(start as usize..end as usize)
}

/// A step with a counted skip and a key of at most 8 bytes (`Branch::fixed_skip` set): one
/// 8-byte load where the view allows, masked, then one table lookup.
#[inline(always)]
fn step_short(
    b: &Branch,
    payload: &[u8],
    fields: &[(u32, u32); MAX_SLOTS],
    slot: u8,
    pos: usize,
) -> Option<(u32, usize)> {
    let view = field_view(payload, fields, b.slot)?;
    let p = if b.slot == slot { pos } else { 0 } + b.fixed_skip as usize;
    let len = b.short_len as usize;
    let key = match view.get(p..p + 8) {
        Some(w) => u64::from_le_bytes(w.try_into().ok()?) & b.short_mask,
        None => pack(view.get(p..p + len)?),
    };
    let next = match &b.table {
        Table::One(k, next) => (key == *k).then_some(*next),
        Table::Short(t) => t.get(key),
        _ => None,
    }?;
    Some((next, p + len))
}

/// The compressed single path below node `n`, if it has one of at least two steps.
fn chain_from(nodes: &[Node], n: u32) -> Option<Chain> {
    let mut segs: Vec<Seg> = Vec::new();
    let (mut cur, mut steps) = (n, 0);
    loop {
        let node = &nodes[cur as usize];
        if cur != n && node.rule != NO_RULE {
            break;
        }
        let [b] = node.branches.as_slice() else { break };
        let Shape::Check { skip, len } = &b.shape else { break };
        if skip.contains(&SkipPart::ToDelim) {
            break;
        }
        let Some((key, child)) = single_key(&b.table, *len as usize) else { break };
        let fixed: u32 = skip.iter().map(|p| if let SkipPart::Fixed(n) = p { *n } else { 0 }).sum();
        match segs.last_mut() {
            Some(seg) if seg.slot == b.slot => {
                seg.expected.extend(std::iter::repeat_n(0, fixed as usize));
                seg.mask.extend(std::iter::repeat_n(0, fixed as usize));
                seg.expected.extend_from_slice(&key);
                seg.mask.extend(std::iter::repeat_n(0xFF, key.len()));
            }
            _ => segs.push(Seg {
                slot: b.slot,
                skip: fixed,
                len: 0,
                words: Box::default(),
                short: None,
                mask: vec![0xFF; key.len()],
                expected: key,
            }),
        }
        steps += 1;
        cur = child;
    }
    for seg in &mut segs {
        seg.len = seg.expected.len() as u32;
        let word = |b: &[u8]| {
            let mut w = [0u8; 8];
            w[..b.len()].copy_from_slice(b);
            u64::from_le_bytes(w)
        };
        seg.words = seg.expected.chunks(8).zip(seg.mask.chunks(8)).map(|(e, m)| (word(e), word(m))).collect();
        if seg.words.len() <= SEG_WORDS {
            let mut short = [(0, 0); SEG_WORDS];
            short[..seg.words.len()].copy_from_slice(&seg.words);
            seg.short = Some(short);
        }
    }
    let min_rule = nodes[n as usize].branches.first()?.min_rule;
    if steps < 2 {
        return None;
    }
    let end = &nodes[cur as usize];
    let leaf = end.branches.is_empty().then_some((end.rule, end.queue));
    let mut segs = segs.into_iter();
    let seg0 = segs.next()?;
    Some(Chain { seg0, rest: segs.collect(), end: cur, min_rule, leaf })
}

fn single_key(table: &Table, len: usize) -> Option<(Vec<u8>, u32)> {
    match table {
        Table::One(k, c) => Some((k.to_le_bytes()[..len].to_vec(), *c)),
        Table::Long(m) if m.len() == 1 => m.iter().next().map(|(k, c)| (k.to_vec(), *c)),
        _ => None,
    }
}

/// Checks a chain from the cursor; the cursor after it, or `None` on a mismatch.
#[inline(always)]
fn run_chain(c: &Chain, payload: &[u8], fields: &[(u32, u32); MAX_SLOTS], slot: u8, pos: usize) -> Option<(u8, usize)> {
    let mut cursor = run_seg(&c.seg0, payload, fields, slot, pos)?;
    for seg in &c.rest {
        cursor = run_seg(seg, payload, fields, cursor.0, cursor.1)?;
    }
    Some(cursor)
}

/// Checks one segment from the cursor.
#[inline(always)]
fn run_seg(seg: &Seg, payload: &[u8], fields: &[(u32, u32); MAX_SLOTS], slot: u8, pos: usize) -> Option<(u8, usize)> {
    let view = field_view(payload, fields, seg.slot)?;
    let p = if seg.slot == slot { pos } else { 0 } + seg.skip as usize;
    let len = seg.len as usize;
    // Compare whole words where the view has the padding bytes, else byte by byte.
    let words = match &seg.short {
        Some(short) => view.get(p..p + SEG_WORDS * 8).map(|data| {
            let data = data.as_chunks::<8>().0;
            let mut diff = 0u64;
            for i in 0..SEG_WORDS {
                diff |= (u64::from_le_bytes(data[i]) ^ short[i].0) & short[i].1;
            }
            diff == 0
        }),
        None => view.get(p..p + seg.words.len() * 8).map(|data| {
            let mut diff = 0u64;
            for (w, (e, m)) in data.as_chunks::<8>().0.iter().zip(&seg.words) {
                diff |= (u64::from_le_bytes(*w) ^ e) & m;
            }
            diff == 0
        }),
    };
    let ok = match words {
        Some(ok) => ok,
        None => masked_eq(view.get(p..p + len)?, &seg.expected, &seg.mask),
    };
    ok.then_some((seg.slot, p + len))
}

/// `data & mask == expected` (expected is zero where mask is), eight bytes at a time.
#[inline]
fn masked_eq(data: &[u8], expected: &[u8], mask: &[u8]) -> bool {
    let mut d = data.chunks_exact(8);
    let mut e = expected.chunks_exact(8);
    let mut m = mask.chunks_exact(8);
    let word = |b: &[u8]| u64::from_le_bytes(b.try_into().unwrap_or([0; 8]));
    let mut diff = 0u64;
    for ((d, e), m) in (&mut d).zip(&mut e).zip(&mut m) {
        diff |= (word(d) ^ word(e)) & word(m);
    }
    for ((d, e), m) in d.remainder().iter().zip(e.remainder()).zip(m.remainder()) {
        diff |= u64::from((d ^ e) & m);
    }
    diff == 0
}

impl Table {
    /// Appends every next state the table leads to.
    fn push_targets(&self, out: &mut Vec<u32>) {
        match self {
            Table::One(_, c) | Table::Always(c) => out.push(*c),
            Table::Short(m) => out.extend(m.iter().map(|(_, v)| v)),
            Table::Long(m) => out.extend(m.values()),
        }
    }
}

fn make_table(shape: &Shape, keys: Vec<(Vec<u8>, usize)>) -> Table {
    if let Shape::Contains { .. } = shape {
        return Table::Always(keys.first().map_or(0, |k| k.1 as u32));
    }
    let short = keys.iter().all(|(k, _)| k.len() <= 8);
    match (short, keys.len()) {
        (true, 1) => Table::One(pack(&keys[0].0), keys[0].1 as u32),
        (true, _) => Table::Short(ShortTable::new(keys.iter().map(|(k, n)| (pack(k), *n as u32)))),
        (false, _) => Table::Long(keys.into_iter().map(|(k, n)| (k.into_boxed_slice(), n as u32)).collect()),
    }
}

/// An open-addressing table from packed keys to states: multiplicative hash, linear probing,
/// at most half full. About 3 ns a lookup where `hashbrown` took 15 (criterion `matcher`).
#[derive(Debug, Clone)]
struct ShortTable {
    shift: u32,
    keys: Box<[u64]>,
    /// `u32::MAX` marks an empty slot.
    vals: Box<[u32]>,
}

impl ShortTable {
    fn new(items: impl ExactSizeIterator<Item = (u64, u32)>) -> ShortTable {
        let size = (items.len() * 2).next_power_of_two().max(2);
        let mut t = ShortTable {
            shift: 64 - size.trailing_zeros(),
            keys: vec![0; size].into_boxed_slice(),
            vals: vec![u32::MAX; size].into_boxed_slice(),
        };
        for (k, v) in items {
            let mut i = t.slot(k);
            while t.vals[i] != u32::MAX && t.keys[i] != k {
                i = (i + 1) & (size - 1);
            }
            t.keys[i] = k;
            t.vals[i] = v;
        }
        t
    }

    #[inline]
    fn slot(&self, k: u64) -> usize {
        (k.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> self.shift) as usize
    }

    #[inline(always)]
    fn get(&self, k: u64) -> Option<u32> {
        let mask = self.keys.len() - 1;
        let mut i = self.slot(k);
        loop {
            let v = *self.vals.get(i)?;
            if v == u32::MAX {
                return None;
            }
            if self.keys[i] == k {
                return Some(v);
            }
            i = (i + 1) & mask;
        }
    }

    fn len(&self) -> usize {
        self.vals.iter().filter(|v| **v != u32::MAX).count()
    }

    fn iter(&self) -> impl Iterator<Item = (u64, u32)> + '_ {
        self.keys.iter().zip(self.vals.iter()).filter(|(_, v)| **v != u32::MAX).map(|(k, v)| (*k, *v))
    }
}

/// Packs up to 8 bytes into a u64 (all keys of one table have the same length).
#[inline]
fn pack(key: &[u8]) -> u64 {
    let mut b = [0u8; 8];
    b[..key.len()].copy_from_slice(key);
    u64::from_le_bytes(b)
}

#[inline]
fn lookup(table: &Table, key: &[u8]) -> Option<u32> {
    match table {
        Table::One(k, next) => (key.len() <= 8 && pack(key) == *k).then_some(*next),
        Table::Short(map) => map.get(pack(key)),
        Table::Long(map) => map.get(key).copied(),
        Table::Always(next) => Some(*next),
    }
}

/// The TLV records of a payload as (field number, view start, view end), where the view is the
/// record's 2 length bytes and its value. Stops at the first malformed or cut-off record: what
/// follows it is not seen.
#[inline(always)]
pub(crate) fn record_views(payload: &[u8]) -> impl Iterator<Item = (u8, usize, usize)> + '_ {
    let mut off = 0usize;
    std::iter::from_fn(move || {
        let header = payload.get(off..off + RECORD_HEADER_LEN)?;
        let end = off + RECORD_HEADER_LEN + u16::from_be_bytes([header[1], header[2]]) as usize;
        if header[0] == 0 || end > payload.len() {
            return None;
        }
        let rec = (header[0], off + 1, end);
        off = end;
        Some(rec)
    })
}

/// Finds the view of each field a root reads: the first record of each.
#[inline(always)]
fn locate(payload: &[u8], root: &Root, fields: &mut [(u32, u32); MAX_SLOTS]) {
    let mut found = 0u8;
    for (ty, start, end) in record_views(payload) {
        if found == root.fields {
            return;
        }
        let slot = root.slot_of[ty as usize];
        if slot != u8::MAX && fields[slot as usize].1 == 0 {
            fields[slot as usize] = (start as u32, end as u32);
            found += 1;
        }
    }
}

/// Every application's machine, indexed by `app_id`.
#[derive(Debug, Clone, Default)]
pub struct Matcher {
    apps: Vec<Option<std::sync::Arc<Machine>>>,
}

impl Matcher {
    /// Compiles every application of a rule set.
    pub fn compile(set: &RuleSet) -> Result<Matcher, CompileError> {
        let mut apps = vec![None; 256];
        for app in &set.apps {
            apps[app.id as usize] = Some(std::sync::Arc::new(Machine::compile(set, app.id)?));
        }
        Ok(Matcher { apps })
    }

    /// The machine of an application.
    pub fn app(&self, app_id: u8) -> Option<&std::sync::Arc<Machine>> {
        self.apps.get(app_id as usize).and_then(|m| m.as_ref())
    }

    /// Decides a request: `None` if its application is not configured.
    pub fn decide(&self, app_id: u8, req_type: u8, payload: &[u8]) -> Option<Decision> {
        Some(self.app(app_id)?.decide(req_type, payload))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The open-addressing table against a `HashMap`.
        #[test]
        fn short_table_agrees_with_hashmap(
            items in prop::collection::hash_map(any::<u64>(), 0u32..1000, 0..200),
            probes in prop::collection::vec(any::<u64>(), 0..50),
        ) {
            let t = ShortTable::new(items.iter().map(|(k, v)| (*k, *v)));
            prop_assert_eq!(t.len(), items.len());
            for (k, v) in &items {
                prop_assert_eq!(t.get(*k), Some(*v));
            }
            for k in probes {
                prop_assert_eq!(t.get(k), items.get(&k).copied());
            }
        }
    }

    #[test]
    fn masked_compare() {
        let expected = b"ab\0\0cdefghijk";
        let mut mask = vec![0xFF; expected.len()];
        mask[2] = 0;
        mask[3] = 0;
        assert!(masked_eq(b"abXYcdefghijk", expected, &mask));
        assert!(!masked_eq(b"abXYcdefghijz", expected, &mask));
        assert!(!masked_eq(b"zbXYcdefghijk", expected, &mask));
    }
}
