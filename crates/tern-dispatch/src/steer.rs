//! Kernel steering: the rules compiled into the classic BPF program of the workers' socket
//! group, so that the kernel delivers a request to the worker its rules name and the RSD in
//! that worker has nothing to hand off.
//!
//! With the RSDs in the workers ([`crate::server::Placement::Workers`]), a socket group that
//! shards by request id gives each worker requests of every rule, and (W-1)/W of them take a
//! ring hop to their worker, waking it. The paper's RSD sits on the NIC, before any core is
//! involved; the nearest a Linux host gets to that is the program the kernel runs to pick the
//! socket of an `SO_REUSEPORT` group. [`Steering::compile`] turns the rules into such a program:
//!
//! - A **single-packet request's first packet** (`pkt_flag` DATA, `pkt_seq_num_in_req` 0,
//!   `req_len_in_pkts` 1) of a declared request type is parsed as QNP's first-packet rule lays
//!   it out (the type's dispatch records lead the payload, in field order), and the type's rules
//!   are tried in file order, each condition by its plain meaning; the first that holds names the
//!   socket, none names the application's default queue.
//! - **Everything else** goes by request id (`req_id mod workers`, as without rules): the
//!   packets of a multi-packet request keep meeting one RSD and its stash, and what the RSD
//!   refuses (unknown types, misplaced records, responses) is spread, not concentrated.
//! - A rule the program cannot express (a `*` skip, `contains`), and every later rule of its
//!   request type, sends the request by request id too; so do request types with more than
//!   [`MAX_FIELDS`] dispatch fields. A rule set too large for one program (4096 instructions)
//!   steers by request id alone.
//!
//! The program only **places** packets; it decides nothing. The RSD in the receiving worker
//! checks every first packet and decides it as before, and hands off what the program placed
//! elsewhere (a rule set being swapped, a request id fallback). So a wrong or stale program
//! costs a ring hop, never a wrong answer: the guarantees of `docs/qnp.md` do not depend on it.
//! The twin test `kernel_steering_agrees_with_the_rsd` (`tests/matcher.rs`) runs the program in
//! [`tern_io::cbpf`]'s interpreter against the RSD.

use tern_io::cbpf::{Assembler, Cmp, Insn, Label, Program};
use tern_wire::qnp::{HEADER_LEN, field};

use crate::rules::pattern::PatOp;
use crate::rules::{CondKind, Rule, RuleSet};

/// Most dispatch fields of one request type the program parses (its scratch memory holds the
/// payload length, a cursor, and each field's value offset and length).
pub const MAX_FIELDS: usize = 7;

/// TLV record header bytes: field number (1) and length (2).
const RECORD_HEADER: u32 = 3;
/// Scratch slots.
const M_LEN: u32 = 0;
const M_CURSOR: u32 = 1;
const fn m_value(i: usize) -> u32 {
    2 + 2 * i as u32
}
const fn m_len(i: usize) -> u32 {
    3 + 2 * i as u32
}

/// A rule set compiled for the kernel, and how much of it the program covers.
#[derive(Debug, Clone)]
pub struct Steering {
    /// The program.
    pub program: Program,
    /// Rules the program decides, of all rules.
    pub rules_compiled: usize,
    /// All rules.
    pub rules_total: usize,
    /// Why rules were left to request-id steering, one line each (empty when none were).
    pub left_out: Vec<String>,
}

impl Steering {
    /// Compiles `set` for a group of `sockets` workers' sockets (queue q is socket q).
    pub fn compile(set: &RuleSet, sockets: u16) -> Steering {
        let sockets = sockets.max(1);
        let mut left_out = Vec::new();
        match assemble(set, sockets, &mut left_out) {
            Ok((program, rules_compiled)) => {
                Steering { program, rules_compiled, rules_total: set.rules.len(), left_out }
            }
            Err(e) => {
                let mut a = Assembler::new();
                let by_id = a.label();
                emit_by_id(&mut a, by_id, sockets);
                Steering {
                    program: a.finish().expect("the request-id program is valid"),
                    rules_compiled: 0,
                    rules_total: set.rules.len(),
                    left_out: vec![format!("the rules do not fit one program ({e}): every request goes by request id")],
                }
            }
        }
    }

    /// Whether the program decides every rule.
    pub fn complete(&self) -> bool {
        self.rules_compiled == self.rules_total
    }

    /// The socket the program picks for a datagram's payload (the interpreter's answer; always
    /// one of the group's sockets).
    pub fn socket_of(&self, payload: &[u8]) -> u32 {
        self.program.run(payload)
    }
}

fn assemble(set: &RuleSet, sockets: u16, left_out: &mut Vec<String>) -> Result<(Program, usize), String> {
    let mut a = Assembler::new();
    let by_id = a.label();
    let mut compiled = 0;
    a.emit(Insn::ld_len());
    a.emit(Insn::st(M_LEN));
    a.unless(Cmp::Ge(HEADER_LEN as u32), by_id);
    a.emit(Insn::ld_b_abs(field::PKT_FLAG as u32));
    a.unless(Cmp::Eq(u32::from(tern_wire::qnp::Flags::DATA.bits())), by_id);
    a.emit(Insn::ld_b_abs(field::PKT_SEQ_NUM_IN_REQ as u32));
    a.unless(Cmp::Eq(0), by_id);
    a.emit(Insn::ld_b_abs(field::REQ_LEN_IN_PKTS as u32));
    a.unless(Cmp::Eq(1), by_id);
    // Which application.
    a.emit(Insn::ld_b_abs(field::APP_ID as u32));
    let app_labels: Vec<Label> = set.apps.iter().map(|_| a.label()).collect();
    for (app, l) in set.apps.iter().zip(&app_labels) {
        a.when(Cmp::Eq(u32::from(app.id)), *l);
    }
    a.goto(by_id);
    for (app, l) in set.apps.iter().zip(app_labels) {
        a.bind(l);
        // Which request type.
        a.emit(Insn::ld_b_abs(field::REQ_TYPE as u32));
        let types: Vec<(u8, Vec<u8>, Label)> =
            app.requests.iter().map(|(m, t)| (*t, m.dispatch_fields(), a.label())).collect();
        for (t, _, tl) in &types {
            a.when(Cmp::Eq(u32::from(*t)), *tl);
        }
        a.goto(by_id);
        for (t, fields, tl) in types {
            a.bind(tl);
            let rules: Vec<_> = set.rules.iter().filter(|r| r.app_id == app.id && r.req_type == t).collect();
            if fields.len() > MAX_FIELDS {
                if !rules.is_empty() {
                    left_out.push(format!(
                        "app {} type {t}: {} dispatch fields (the program parses at most {MAX_FIELDS}): its {} rules go by request id",
                        app.name,
                        fields.len(),
                        rules.len()
                    ));
                }
                a.goto(by_id);
                continue;
            }
            parse_records(&mut a, &fields, by_id);
            // Rules up to the first the program cannot express; that one and the rest go by
            // request id.
            let cut = rules.iter().position(|r| inexpressible(r).is_some()).unwrap_or(rules.len());
            let usable = &rules[..cut];
            let mut i = 0;
            while i < usable.len() {
                let run = run_len(&usable[i..], &fields);
                if run >= MIN_RUN {
                    emit_run(&mut a, &usable[i..i + run], &fields);
                    i += run;
                } else {
                    emit_rule(&mut a, usable[i], &fields);
                    i += 1;
                }
            }
            compiled += usable.len();
            match rules.get(cut) {
                Some(rule) => {
                    let (field_name, e) = inexpressible(rule).expect("cut at an inexpressible rule");
                    left_out.push(format!(
                        "rule \"{}\": field `{field_name}`: {e}: it and the {} rules after it in app {} type {t} go by request id",
                        rule.name,
                        rules.len() - cut - 1,
                        app.name
                    ));
                    a.goto(by_id);
                }
                None => a.emit(Insn::ret_k(u32::from(app.default_queue))),
            }
        }
    }
    emit_by_id(&mut a, by_id, sockets);
    let program = a.finish().map_err(|e| e.to_string())?;
    Ok((program, compiled))
}

/// Rules in a row that a binary search can pick from (see [`run_len`]): fewer are tried one by
/// one.
const MIN_RUN: usize = 4;

/// The field and reason of a rule's first condition the program cannot check, if any.
fn inexpressible(rule: &Rule) -> Option<(String, &'static str)> {
    rule.conditions.iter().find_map(|c| expressible(&c.kind).err().map(|e| (c.field_name.clone(), e)))
}

/// Tries one rule: its conditions, then its queue; on to the next instruction if one fails.
fn emit_rule(a: &mut Assembler, rule: &Rule, fields: &[u8]) {
    let next = a.label();
    rule_body(a, rule, fields, next);
    a.bind(next);
}

/// A rule's conditions, going to `fail` if one does not hold, then the return of its queue.
fn rule_body(a: &mut Assembler, rule: &Rule, fields: &[u8], fail: Label) {
    for c in &rule.conditions {
        match fields.iter().position(|&f| f == c.field) {
            Some(slot) => condition(a, &c.kind, slot, fail),
            // A condition on a field that is not a dispatch field never holds.
            None => a.goto(fail),
        }
    }
    a.emit(Insn::ret_k(u32::from(rule.queue)));
}

/// The first bytes a rule checks, as a search key: (field slot, position in the value, width
/// 1, 2 or 4, the bytes big-endian).
fn lead(rule: &Rule, fields: &[u8]) -> Option<(usize, u32, u32, u32)> {
    let c = rule.conditions.first()?;
    let slot = fields.iter().position(|&f| f == c.field)?;
    let (at, b): (u64, &[u8]) = match &c.kind {
        CondKind::Exact(b) | CondKind::Prefix(b) => (0, b),
        CondKind::Pattern(ops) => {
            let mut at = 0u64;
            let mut first = None;
            for op in ops {
                match op {
                    PatOp::Skip(n) => at += u64::from(*n),
                    PatOp::Check(b) => {
                        first = Some((at, b.as_slice()));
                        break;
                    }
                    PatOp::ToDelim => return None,
                }
            }
            first?
        }
        CondKind::Suffix(_) | CondKind::Contains(_) => return None,
    };
    let w = match b.len() {
        0 => return None,
        1 => 1,
        2 | 3 => 2,
        _ => 4,
    };
    let at = u32::try_from(at).ok().filter(|at| at.checked_add(w).is_some())?;
    Some((slot, at, w, b[..w as usize].iter().fold(0u32, |v, &c| (v << 8) | u32::from(c))))
}

/// How many rules from the first of `rules` check the same place first with different bytes:
/// no request can match two of them, so their order does not matter among themselves and a
/// binary search on those bytes finds the one to try. 0 if the first rule has no such place.
fn run_len(rules: &[&Rule], fields: &[u8]) -> usize {
    let Some((slot, at, w, v)) = rules.first().and_then(|r| lead(r, fields)) else { return 0 };
    let mut seen = std::collections::HashSet::from([v]);
    1 + rules[1..]
        .iter()
        .take_while(|r| match lead(r, fields) {
            Some((s, a, x, v)) if (s, a, x) == (slot, at, w) => seen.insert(v),
            _ => false,
        })
        .count()
}

/// A run of rules (see [`run_len`]): load the bytes they all check first, binary-search them,
/// try the one rule with those bytes; on to after the run if it fails or none has them.
fn emit_run(a: &mut Assembler, run: &[&Rule], fields: &[u8]) {
    let (slot, at, w, _) = lead(run[0], fields).expect("a run has a lead");
    let after = a.label();
    a.emit(Insn::ld_mem(m_len(slot)));
    a.unless(Cmp::Ge(at + w), after);
    a.emit(Insn::ldx_mem(m_value(slot)));
    a.emit(match w {
        1 => Insn::ld_b_ind(at),
        2 => Insn::ld_h_ind(at),
        _ => Insn::ld_w_ind(at),
    });
    let mut keyed: Vec<(u32, Label, &Rule)> =
        run.iter().map(|r| (lead(r, fields).expect("a run has a lead").3, a.label(), *r)).collect();
    keyed.sort_unstable_by_key(|k| k.0);
    let entries: Vec<(u32, Label)> = keyed.iter().map(|k| (k.0, k.1)).collect();
    search(a, &entries, after);
    for (_, l, rule) in keyed {
        a.bind(l);
        rule_body(a, rule, fields, after);
    }
    a.bind(after);
}

/// Goes to the label of the entry equal to `A` (entries sorted by value), or to `miss`.
fn search(a: &mut Assembler, entries: &[(u32, Label)], miss: Label) {
    if entries.len() <= 3 {
        for &(v, l) in entries {
            a.when(Cmp::Eq(v), l);
        }
        a.goto(miss);
        return;
    }
    let mid = entries.len() / 2;
    let right = a.label();
    a.when(Cmp::Gt(entries[mid - 1].0), right);
    search(a, &entries[..mid], miss);
    a.bind(right);
    search(a, &entries[mid..], miss);
}

/// `Ok` if the program can check `kind`; else why not.
fn expressible(kind: &CondKind) -> Result<(), &'static str> {
    match kind {
        CondKind::Pattern(ops) if ops.iter().any(|o| matches!(o, PatOp::ToDelim)) => {
            Err("a `*` skip (a search the program cannot loop over)")
        }
        CondKind::Contains(b) if !b.is_empty() => Err("`contains` (a search the program cannot loop over)"),
        _ => Ok(()),
    }
}

/// Parses the leading dispatch records into scratch memory, or goes to `bad`.
fn parse_records(a: &mut Assembler, fields: &[u8], bad: Label) {
    a.emit(Insn::ld_imm(HEADER_LEN as u32));
    a.emit(Insn::st(M_CURSOR));
    for (i, &f) in fields.iter().enumerate() {
        // The record's header lies within the payload.
        a.emit(Insn::alu_add_k(RECORD_HEADER));
        a.emit(Insn::ldx_mem(M_LEN));
        a.when(Cmp::GtX, bad);
        // It is the next dispatch field.
        a.emit(Insn::ldx_mem(M_CURSOR));
        a.emit(Insn::ld_b_ind(0));
        a.unless(Cmp::Eq(u32::from(f)), bad);
        a.emit(Insn::ld_h_ind(1));
        a.emit(Insn::st(m_len(i)));
        a.emit(Insn::txa());
        a.emit(Insn::alu_add_k(RECORD_HEADER));
        a.emit(Insn::st(m_value(i)));
        // Its value lies within the payload too.
        a.emit(Insn::ldx_mem(m_len(i)));
        a.emit(Insn::alu_add_x());
        a.emit(Insn::ldx_mem(M_LEN));
        a.when(Cmp::GtX, bad);
        a.emit(Insn::st(M_CURSOR));
    }
}

/// Checks one condition on dispatch field `slot`, going to `fail` if it does not hold.
fn condition(a: &mut Assembler, kind: &CondKind, slot: usize, fail: Label) {
    match kind {
        CondKind::Exact(b) => {
            // The length is exact, so every byte lies within the value.
            a.emit(Insn::ld_mem(m_len(slot)));
            a.unless(Cmp::Eq(b.len() as u32), fail);
            if !b.is_empty() {
                a.emit(Insn::ldx_mem(m_value(slot)));
                compare(a, 0, b, fail);
            }
        }
        CondKind::Prefix(b) => checks_at(a, slot, &[(0, b)], fail),
        CondKind::Pattern(ops) => {
            let mut at = 0u64;
            let mut checks = Vec::new();
            for op in ops {
                match op {
                    PatOp::Skip(n) => at += u64::from(*n),
                    PatOp::Check(b) => {
                        checks.push((at, b.as_slice()));
                        at += b.len() as u64;
                    }
                    PatOp::ToDelim => unreachable!("refused by `expressible`"),
                }
            }
            checks_at(a, slot, &checks, fail);
        }
        CondKind::Suffix(b) => {
            let n = b.len() as u32;
            a.emit(Insn::ld_mem(m_len(slot)));
            a.unless(Cmp::Ge(n), fail);
            // X = value start + length - n.
            a.emit(Insn::ld_mem(m_value(slot)));
            a.emit(Insn::ldx_mem(m_len(slot)));
            a.emit(Insn::alu_add_x());
            a.emit(Insn::alu_sub_k(n));
            a.emit(Insn::tax());
            compare(a, 0, b, fail);
        }
        CondKind::Contains(b) => debug_assert!(b.is_empty(), "refused by `expressible`"),
    }
}

/// The value of field `slot` has each `(at, bytes)` of `checks` (in ascending places): one
/// bounds check for the farthest byte (all must hold, so a value too short for the last fails
/// the condition), then the comparisons.
fn checks_at(a: &mut Assembler, slot: usize, checks: &[(u64, &[u8])], fail: Label) {
    let Some(end) = checks.iter().map(|(at, b)| at + b.len() as u64).max() else { return };
    if end == 0 {
        return;
    }
    // Values are at most 65535 bytes: a check reaching past that never holds.
    let Ok(end) = u32::try_from(end) else {
        a.goto(fail);
        return;
    };
    a.emit(Insn::ld_mem(m_len(slot)));
    a.unless(Cmp::Ge(end), fail);
    a.emit(Insn::ldx_mem(m_value(slot)));
    for (at, b) in checks {
        compare(a, *at as u32, b, fail);
    }
}

/// The payload has `b` at `X + at` (in bounds: checked by the caller).
fn compare(a: &mut Assembler, at: u32, b: &[u8], fail: Label) {
    let mut off = 0usize;
    while off < b.len() {
        let rest = &b[off..];
        let (insn, n) = match rest.len() {
            4.. => (Insn::ld_w_ind(at + off as u32), 4),
            2 | 3 => (Insn::ld_h_ind(at + off as u32), 2),
            _ => (Insn::ld_b_ind(at + off as u32), 1),
        };
        let want = rest[..n].iter().fold(0u32, |v, &c| (v << 8) | u32::from(c));
        a.emit(insn);
        a.unless(Cmp::Eq(want), fail);
        off += n;
    }
}

/// `by_id:` the socket of `req_id mod sockets` (socket 0 for a datagram too short to hold a
/// request id: never the kernel's flow hash, which may pick a socket that only sends).
fn emit_by_id(a: &mut Assembler, by_id: Label, sockets: u16) {
    a.bind(by_id);
    a.emit(Insn::ld_len());
    a.emit(Insn::jge(field::REQ_ID.end as u32, 1, 0));
    a.emit(Insn::ret_k(0));
    a.emit(Insn::ld_w_abs(field::REQ_ID.start as u32));
    a.emit(Insn::alu_mod_k(u32::from(sockets)));
    a.emit(Insn::ret_a());
}
