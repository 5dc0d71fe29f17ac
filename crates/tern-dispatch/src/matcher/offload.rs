//! Mapping a compiled machine onto the paper's Matcher: RAM and CAM entries, and why not.
//!
//! The hardware (QingNiao §4.2.1, `shared/HARDWARE.md`) pairs a CAM of
//! `{app_id, req_type, field, state, up to 8 bytes}` keys with a RAM of the same depth whose
//! entry `{field, bytes to skip, bytes to check, state}` says what the matched key leads to: the
//! next skip-and-check and its state, or, with 0 bytes to skip and check, the queue. Bytes to skip
//! 0xFF means "to the next delimiter". A CAM miss sends the request to the default queue.
//!
//! Tern maps each (application, request type) to one CAM entry in state 0 with no bytes (the
//! first skip-and-check) and each key of each state to one more: RAM and CAM use are equal,
//! `request types + keys`. States only need to be unique per (application, request type), since
//! both are in the CAM key; with 8-bit states that is at most 256 including state 0.
//!
//! What the hardware cannot run:
//! - two step shapes at one state (the state's RAM entry holds one field, skip and check size);
//! - a rule ending at a state where an earlier rule still checks more, unless the ending rule's
//!   queue is the default queue (a CAM miss cannot fall back to any other queue);
//! - `suffix` (the skip would depend on the field's length), `contains` (a search);
//! - a skip to the delimiter combined with a counted skip, a counted skip over 254 bytes, a check
//!   over 255 bytes (8-bit RAM fields), a queue over 255;
//! - against a profile: checks wider than `matcher.check_bytes`, more entries than
//!   `matcher.ram_entries` / `matcher.cam_entries`, more states than `matcher.states`.

use serde::Serialize;
use tern_hw::rsd::{Projection, RsdModel};
use tern_hw::{Ledger, Profile, resource};

use super::{Machine, Shape, SkipPart, Table, steps_of};
use crate::rules::RuleSet;

/// Largest counted skip a RAM entry holds (0xFF means "to the delimiter").
pub const MAX_HW_SKIP: u32 = 254;
/// Largest check a RAM entry's 8-bit count holds.
pub const MAX_HW_CHECK: u32 = 255;
/// Largest queue index a RAM entry's 8-bit state holds.
pub const MAX_HW_QUEUE: u16 = 255;

/// Why (part of) a rule set cannot run on the hardware.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// The rules involved.
    pub rules: Vec<String>,
    /// Why.
    pub reason: String,
}

/// One rule's cost.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RuleCost {
    /// Rule name.
    pub rule: String,
    /// Skip-and-checks a request matching it walks.
    pub skip_and_checks: u32,
}

/// One application's use of the Matcher.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AppUse {
    /// Application name.
    pub app: String,
    /// `app_id`.
    pub id: u8,
    /// Rules.
    pub rules: usize,
    /// RAM entries (equal to CAM entries).
    pub ram_entries: u64,
    /// CAM entries.
    pub cam_entries: u64,
    /// Most states any of its request types needs (state 0 included).
    pub states: u64,
    /// Widest check, in bytes.
    pub widest_check: u32,
    /// Most skip-and-checks any request walks.
    pub max_skip_and_checks: u32,
    /// Per rule.
    pub per_rule: Vec<RuleCost>,
    /// Hardware projection at the worst rule, where the profile models the RSD.
    pub projection: Option<Projection>,
}

/// What a rule set needs of a profile's Matcher, and whether it fits.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct OffloadReport {
    /// Profile name.
    pub profile: String,
    /// Whether the rule set can run on this profile's Matcher.
    pub offloadable: bool,
    /// Per application.
    pub apps: Vec<AppUse>,
    /// RAM entries in total.
    pub ram_entries: u64,
    /// CAM entries in total.
    pub cam_entries: u64,
    /// RAM capacity, if bounded.
    pub ram_capacity: Option<u64>,
    /// CAM capacity, if bounded.
    pub cam_capacity: Option<u64>,
    /// Everything that prevents offload.
    pub problems: Vec<Problem>,
}

/// Options of the projection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Workload {
    /// Packets per request.
    pub packets: u32,
    /// Bytes per frame (Ethernet header to end of payload).
    pub frame_bytes: u32,
}

impl Default for Workload {
    /// The paper's PingPong: one 128-byte frame.
    fn default() -> Workload {
        Workload { packets: 1, frame_bytes: 128 }
    }
}

impl Machine {
    /// Structural problems: shapes the paper's Matcher cannot hold, whatever its size.
    fn shape_problems(&self, out: &mut Vec<Problem>) {
        let name = |i: u32| self.rule_name(i).unwrap_or("?").to_string();
        for node in self.reachable().into_iter().map(|i| &self.nodes[i as usize]) {
            if node.branches.len() > 1 {
                let rules: Vec<String> = node.branches.iter().map(|b| name(b.min_rule)).collect();
                let shapes: Vec<String> = node
                    .branches
                    .iter()
                    .map(|b| {
                        format!("\"{}\" {} bytes of field {}", name(b.min_rule), b.shape, self.field_number(b.slot))
                    })
                    .collect();
                out.push(Problem {
                    rules,
                    reason: format!(
                        "need different skip/check shapes at one state (a RAM entry holds one): {}",
                        shapes.join("; ")
                    ),
                });
            }
            if node.rule != super::NO_RULE
                && let Some(b) = node.branches.first()
                && b.min_rule < node.rule
                && node.queue != self.default_queue
            {
                out.push(Problem {
                    rules: vec![name(node.rule), name(b.min_rule)],
                    reason: format!(
                        "\"{}\" ends at a state where the earlier \"{}\" still checks more bytes; on a CAM miss the \
                         hardware can only fall back to the default queue {}, not to queue {}",
                        name(node.rule),
                        name(b.min_rule),
                        self.default_queue,
                        node.queue
                    ),
                });
            }
        }
    }

    fn field_number(&self, slot: u8) -> u8 {
        self.slot_fields.get(slot as usize).copied().unwrap_or(0)
    }

    /// (RAM = CAM entries, most states of one request type).
    fn entries(&self) -> (u64, u64) {
        let keys: u64 = self
            .reachable()
            .into_iter()
            .flat_map(|i| self.nodes[i as usize].branches.iter())
            .map(|b| match &b.table {
                Table::One(..) | Table::Always(_) => 1,
                Table::Short(m) => m.len() as u64,
                Table::Long(m) => m.len() as u64,
            })
            .sum();
        let states = self
            .roots
            .iter()
            .map(|r| {
                // Count the states below this root that carry a branch (terminals need none).
                let (mut stack, mut n) = (vec![r.node], 1u64);
                while let Some(i) = stack.pop() {
                    let node = &self.nodes[i as usize];
                    n += u64::from(!node.branches.is_empty());
                    for b in &node.branches {
                        b.table.push_targets(&mut stack);
                    }
                }
                n
            })
            .max()
            .unwrap_or(1);
        (self.roots.len() as u64 + keys, states)
    }
}

/// Maps a rule set onto a profile's Matcher: entries, per-rule skip-and-checks, everything that
/// does not fit, and (where the profile models the RSD) the projected cycles and rate.
pub fn report(set: &RuleSet, profile: &Profile, workload: Workload) -> Result<OffloadReport, super::CompileError> {
    analyse(set, profile, workload).map(|(r, _)| r)
}

/// [`report`], and the machines it compiled (one per app, in `set.apps` order).
fn analyse(
    set: &RuleSet,
    profile: &Profile,
    workload: Workload,
) -> Result<(OffloadReport, Vec<Machine>), super::CompileError> {
    let mut machines = Vec::with_capacity(set.apps.len());
    let mut problems = Vec::new();
    let mut apps = Vec::new();
    let mut ledger = Ledger::new(profile);
    let model = RsdModel::from_profile(profile);
    for app in &set.apps {
        let machine = Machine::compile(set, app.id)?;
        machine.shape_problems(&mut problems);
        let mut per_rule = Vec::new();
        let mut widest = 0u32;
        for rule in set.rules_of(app.id) {
            let steps = steps_of(rule).map_err(|reason| super::CompileError { rule: rule.name.clone(), reason })?;
            let mut why = Vec::new();
            for s in &steps {
                match &s.shape {
                    Shape::Suffix { .. } => why.push(
                        "a suffix needs a skip that depends on the field's length; a RAM entry's skip is a constant"
                            .to_string(),
                    ),
                    Shape::Contains { .. } => {
                        why.push("contains needs a search; the Matcher only compares bytes at known places".to_string())
                    }
                    Shape::Check { skip, len } => {
                        widest = widest.max(*len);
                        if skip.len() > 1 {
                            why.push("combines a skip to the delimiter with a counted skip; a RAM entry's skip is one or the other".to_string());
                        }
                        if let Some(SkipPart::Fixed(n)) = skip.first()
                            && *n > MAX_HW_SKIP
                        {
                            why.push(format!("skips {n} bytes at once; a RAM entry skips at most {MAX_HW_SKIP} (0xFF means to the delimiter)"));
                        }
                        if *len > MAX_HW_CHECK {
                            why.push(format!("checks {len} bytes at once; a RAM entry's count is 8-bit"));
                        } else if let Some(w) = profile.capacity(resource::MATCHER_CHECK_BYTES)
                            && u64::from(*len) > w
                        {
                            why.push(format!(
                                "checks {len} bytes at once; the CAM compares at most {w} ({} in {})",
                                resource::MATCHER_CHECK_BYTES,
                                profile.name
                            ));
                        }
                    }
                }
            }
            if rule.queue > MAX_HW_QUEUE {
                why.push(format!("queue {} does not fit a RAM entry's 8-bit state", rule.queue));
            }
            why.dedup();
            for reason in why {
                problems.push(Problem { rules: vec![rule.name.clone()], reason });
            }
            per_rule.push(RuleCost { rule: rule.name.clone(), skip_and_checks: steps.len() as u32 });
        }
        let (entries, states) = machine.entries();
        let owner = format!("app \"{}\"", app.name);
        for (res, amount) in [(resource::MATCHER_RAM_ENTRIES, entries), (resource::MATCHER_CAM_ENTRIES, entries)] {
            if let Err(e) = ledger.claim(res, amount, &owner) {
                let rules = set.rules_of(app.id).map(|r| r.name.clone()).collect();
                problems.push(Problem { rules, reason: e.to_string() });
            }
        }
        if let Err(e) = ledger.check_limit(resource::MATCHER_STATES, states, &owner) {
            problems.push(Problem { rules: Vec::new(), reason: e.to_string() });
        }
        let max_k = per_rule.iter().map(|r| r.skip_and_checks).max().unwrap_or(0);
        apps.push(AppUse {
            app: app.name.clone(),
            id: app.id,
            rules: per_rule.len(),
            ram_entries: entries,
            cam_entries: entries,
            states,
            widest_check: widest,
            max_skip_and_checks: max_k,
            per_rule,
            projection: model.as_ref().map(|m| m.project(max_k, workload.packets, workload.frame_bytes)),
        });
        machines.push(machine);
    }
    let ram_entries = apps.iter().map(|a| a.ram_entries).sum();
    let report = OffloadReport {
        profile: profile.name.clone(),
        offloadable: problems.is_empty(),
        apps,
        ram_entries,
        cam_entries: ram_entries,
        ram_capacity: profile.capacity(resource::MATCHER_RAM_ENTRIES),
        cam_capacity: profile.capacity(resource::MATCHER_CAM_ENTRIES),
        problems,
    };
    Ok((report, machines))
}

/// A RAM entry: what to do after a CAM hit (or, for the entry of state 0, first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct RamEntry {
    /// Field to read (its number).
    pub field: u8,
    /// Bytes to skip; [`SKIP_TO_DELIMITER`] for "to the next delimiter".
    pub skip: u8,
    /// Bytes to check; 0 together with `skip` 0 makes this a terminal entry.
    pub check: u8,
    /// The next state, or for a terminal entry the queue.
    pub state: u8,
}

/// `skip` value meaning "skip to just after the next delimiter" (the authors' artifact).
pub const SKIP_TO_DELIMITER: u8 = 0xFF;

impl RamEntry {
    /// Whether this entry ends the walk with a queue.
    pub fn is_terminal(&self) -> bool {
        self.skip == 0 && self.check == 0
    }
}

/// A CAM entry; a hit on entry `i` continues with RAM entry `i`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CamEntry {
    /// `app_id`.
    pub app_id: u8,
    /// `req_type`.
    pub req_type: u8,
    /// Field the bytes came from (0 for the entry of state 0).
    pub field: u8,
    /// State.
    pub state: u8,
    /// The checked bytes (empty for the entry of state 0).
    pub bytes: Vec<u8>,
}

/// The Matcher's contents for a rule set: CAM entry `i` pairs with RAM entry `i`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HwTables {
    /// CAM entries.
    pub cam: Vec<CamEntry>,
    /// RAM entries.
    pub ram: Vec<RamEntry>,
    /// Per app id: the default queue (where a CAM miss goes).
    pub default_queue: Vec<(u8, u16)>,
    /// The delimiter byte.
    pub delimiter: u8,
}

impl Machine {
    /// The RAM entry describing node `n`: its branch's step, or a terminal with its queue.
    fn ram_entry(&self, n: u32, state: u8) -> Option<RamEntry> {
        let node = &self.nodes[n as usize];
        let Some(b) = node.branches.first() else {
            return Some(RamEntry { field: 0, skip: 0, check: 0, state: u8::try_from(node.queue).ok()? });
        };
        let Shape::Check { skip, len } = &b.shape else { return None };
        let skip = match skip.as_slice() {
            [] => 0,
            [SkipPart::Fixed(n)] if *n <= MAX_HW_SKIP => *n as u8,
            [SkipPart::ToDelim] => SKIP_TO_DELIMITER,
            _ => return None,
        };
        Some(RamEntry { field: self.field_number(b.slot), skip, check: u8::try_from(*len).ok()?, state })
    }

    fn emit(&self, tables: &mut HwTables) -> Option<()> {
        for root in &self.roots {
            // State 0's entry leads to the root's first step.
            let mut next_state = 1u16;
            let root_state = u8::try_from(next_state).ok()?;
            let mut queue = std::collections::VecDeque::from([(root.node, root_state)]);
            tables.cam.push(CamEntry {
                app_id: self.app_id,
                req_type: root.req_type,
                field: 0,
                state: 0,
                bytes: Vec::new(),
            });
            tables.ram.push(self.ram_entry(root.node, root_state)?);
            while let Some((n, state)) = queue.pop_front() {
                let node = &self.nodes[n as usize];
                let Some(b) = node.branches.first() else { continue };
                let field = self.field_number(b.slot);
                let keys: Vec<(Vec<u8>, u32)> = match &b.table {
                    Table::One(k, c) => vec![(k.to_le_bytes()[..self.check_len(b)].to_vec(), *c)],
                    Table::Short(m) => {
                        m.iter().map(|(k, c)| (k.to_le_bytes()[..self.check_len(b)].to_vec(), c)).collect()
                    }
                    Table::Long(m) => m.iter().map(|(k, c)| (k.to_vec(), *c)).collect(),
                    Table::Always(_) => return None,
                };
                // Number states in key order so the tables do not depend on hashing.
                let mut keys = keys;
                keys.sort();
                for (bytes, child) in keys {
                    let child_state = if self.nodes[child as usize].branches.is_empty() {
                        0
                    } else {
                        next_state += 1;
                        u8::try_from(next_state).ok()?
                    };
                    tables.cam.push(CamEntry { app_id: self.app_id, req_type: root.req_type, field, state, bytes });
                    tables.ram.push(self.ram_entry(child, child_state)?);
                    queue.push_back((child, child_state));
                }
            }
        }
        Some(())
    }

    fn check_len(&self, b: &super::Branch) -> usize {
        match &b.shape {
            Shape::Check { len, .. } | Shape::Suffix { len } => *len as usize,
            Shape::Contains { .. } => 0,
        }
    }
}

impl HwTables {
    /// The Matcher's contents for a rule set, or everything that keeps it off `profile`'s
    /// Matcher (the problems of [`report`]).
    pub fn build(set: &RuleSet, profile: &Profile) -> Result<HwTables, Vec<Problem>> {
        let (r, machines) = analyse(set, profile, Workload::default())
            .map_err(|e| vec![Problem { rules: vec![e.rule.clone()], reason: e.reason.clone() }])?;
        if !r.offloadable {
            return Err(r.problems);
        }
        let mut t = HwTables { cam: Vec::new(), ram: Vec::new(), default_queue: Vec::new(), delimiter: set.delimiter };
        for (app, m) in set.apps.iter().zip(&machines) {
            m.emit(&mut t).ok_or_else(|| {
                vec![Problem {
                    rules: Vec::new(),
                    reason: format!("app \"{}\" does not map onto the Matcher", app.name),
                }]
            })?;
            t.default_queue.push((app.id, app.default_queue));
        }
        Ok(t)
    }

    /// Runs the hardware's walk on a first packet, with nothing but these tables: a CAM lookup
    /// per skip-and-check, a miss to the default queue. Returns the queue and the number of
    /// skip-and-checks, or `None` for an unknown application.
    pub fn simulate(&self, app_id: u8, req_type: u8, payload: &[u8]) -> Option<(u16, u32)> {
        let default = self.default_queue.iter().find(|(a, _)| *a == app_id)?.1;
        let cam = |field: u8, state: u8, bytes: &[u8]| {
            self.cam.iter().position(|e| {
                e.app_id == app_id && e.req_type == req_type && e.field == field && e.state == state && e.bytes == bytes
            })
        };
        let Some(mut i) = cam(0, 0, &[]) else { return Some((default, 0)) };
        let (mut cur_field, mut pos, mut k) = (0u8, 0usize, 0u32);
        loop {
            let e = self.ram[i];
            if e.is_terminal() {
                return Some((u16::from(e.state), k));
            }
            k += 1;
            let Some(view) = field_view(payload, e.field) else { return Some((default, k)) };
            if e.field != cur_field {
                (cur_field, pos) = (e.field, 0);
            }
            if e.skip == SKIP_TO_DELIMITER {
                let from = pos.max(2);
                match view.get(from..).and_then(|v| v.iter().position(|&c| c == self.delimiter)) {
                    Some(j) => pos = from + j + 1,
                    None => return Some((default, k)),
                }
            } else {
                pos += usize::from(e.skip);
            }
            let Some(bytes) = view.get(pos..pos + usize::from(e.check)) else { return Some((default, k)) };
            pos += usize::from(e.check);
            match cam(e.field, e.state, bytes) {
                Some(j) => i = j,
                None => return Some((default, k)),
            }
        }
    }
}

/// The view (2 length bytes + value) of a field's first record.
fn field_view(payload: &[u8], field: u8) -> Option<&[u8]> {
    super::record_views(payload).find(|r| r.0 == field).map(|(_, start, end)| &payload[start..end])
}
