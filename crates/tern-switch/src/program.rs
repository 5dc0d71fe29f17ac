//! Switch programs as data (CLIP §III-C; docs/clip.md, "Programs"): a TOML file in P4's
//! vocabulary — the request and response parameters the program's packets carry to and from a
//! server, metadata, register arrays, match-action tables and actions built from primitive
//! operations, and the `pre_processing` and `post_processing` controls that apply them, with a
//! named remote handler between them. [`Program::parse`] checks every name and width, naming
//! the bad item; [`Program::placement`] puts its tables and registers in a pipe's stages.
//!
//! The program runs as the paper's top-level control: `pre_processing` (which may set `flight`
//! and the request's parameters), the remote handler when `flight` is set, then
//! `post_processing` on the response. `post_processing` may not send to a server (no `flight`
//! or `ecmp` in its actions): a response never goes back to a server, so no packet loops.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::place::{self, Item, MatchKind, RegisterSpec, TableSpec};

/// Header fields the parser extracts (its states: ethernet, then ipv4, then tcp or udp), with
/// their widths in bits, and the standard metadata.
pub const HEADER_FIELDS: [(&str, u32); 19] = [
    ("ethernet.dst", 48),
    ("ethernet.src", 48),
    ("ethernet.type", 16),
    ("ipv4.tos", 8),
    ("ipv4.ttl", 8),
    ("ipv4.proto", 8),
    ("ipv4.src", 32),
    ("ipv4.dst", 32),
    ("tcp.src_port", 16),
    ("tcp.dst_port", 16),
    ("tcp.seq", 32),
    ("tcp.flags", 8),
    ("udp.src_port", 16),
    ("udp.dst_port", 16),
    ("meta.ingress_port", 9),
    ("meta.egress_port", 9),
    ("meta.flight", 1),
    ("meta.server", 16),
    ("meta.payload_len", 16),
];

/// Bytes of parameters a CLIP header carries at most (`param_len` is one byte).
pub const MAX_PARAM_BYTES: u32 = 255;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    name: String,
    program: u16,
    #[serde(default)]
    handler: Option<String>,
    #[serde(default)]
    request: Vec<RawField>,
    #[serde(default)]
    response: Vec<RawField>,
    #[serde(default)]
    metadata: Vec<RawField>,
    #[serde(default)]
    register: Vec<RawRegister>,
    #[serde(default)]
    table: Vec<RawTable>,
    #[serde(default)]
    action: Vec<RawAction>,
    #[serde(default)]
    pre_processing: Vec<String>,
    #[serde(default)]
    post_processing: Vec<String>,
    #[serde(default)]
    header: Vec<RawHeader>,
    #[serde(default)]
    parser: Vec<RawState>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHeader {
    name: String,
    fields: Vec<RawField>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawState {
    after: String,
    select: String,
    value: u64,
    extract: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawField {
    name: String,
    bits: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRegister {
    name: String,
    entries: u64,
    bits: u32,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawKey {
    field: String,
    #[serde(rename = "match")]
    kind: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTable {
    name: String,
    key: Vec<RawKey>,
    size: u64,
    actions: Vec<String>,
    default: String,
    #[serde(default)]
    mirrored: bool,
    #[serde(default)]
    learn: Option<String>,
    #[serde(default)]
    install: Option<String>,
    #[serde(default)]
    remove: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAction {
    name: String,
    #[serde(default)]
    params: Vec<RawField>,
    ops: Vec<toml::Table>,
}

/// An operand: a field (header, metadata, request, response, or an action's parameter) or a
/// constant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operand {
    Field(String),
    Const(u64),
}

/// A primitive operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `dst = src`.
    Set { dst: String, src: Operand },
    /// `dst = a OP b` (wrapping at `dst`'s width).
    Alu { kind: AluKind, dst: String, a: Operand, b: Operand },
    /// `dst = hash(fields)` (the switch's hash unit over the fields' bytes).
    Hash { dst: String, fields: Vec<String> },
    /// `dst = register[index]`.
    RegRead { register: String, index: Operand, dst: String },
    /// `register[index] = src`.
    RegWrite { register: String, index: Operand, src: Operand },
    /// `register[index] += value`, and `dst` (if any) gets the new value: one read-modify-write.
    RegAdd { register: String, index: Operand, value: Operand, dst: Option<String> },
    /// If `value` is after `register[index]` in serial arithmetic at the register's width
    /// (RFC 1982: their difference, as a signed number, is positive), `register[index] = value`
    /// and `dst = 0`; otherwise `dst = 1` (not beyond the highest seen). One stateful-ALU
    /// read-modify-write with a condition.
    RegAdvance { register: String, index: Operand, value: Operand, dst: String },
    /// Send out of a port.
    Egress { port: Operand },
    /// Send to the server group (ECMP over its members) and set `flight`.
    Ecmp,
    /// Set `flight`: the remote handler runs.
    Flight,
    /// Drop the packet.
    Drop,
}

/// An arithmetic or bitwise operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AluKind {
    Add,
    Sub,
    And,
    Or,
    Xor,
}

/// A named parameterized action.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Action {
    pub name: String,
    pub params: Vec<(String, u32)>,
    pub ops: Vec<Op>,
}

/// A match-action table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    pub name: String,
    pub key: Vec<(String, MatchKind)>,
    pub size: u64,
    pub actions: Vec<String>,
    pub default: String,
    /// A server-side twin holds its entries beyond the switch's (`crate::mirror`).
    pub mirrored: bool,
    /// A mirrored table's entries as the servers answer them: this action of the table's, its
    /// parameters the response's fields of the same names (the switch learns an entry from a
    /// flow's response when the controller wants it in the original table).
    pub learn: Option<String>,
    /// Conditions on a response's fields: one that meets `install` puts the entry it answers
    /// in the switch's table at once (not by the heavy-hitter offload); one that meets
    /// `remove` takes it out (TCP retransmission detection's per-connection entries).
    pub install: Option<Guard>,
    pub remove: Option<Guard>,
}

/// A register array.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Register {
    pub name: String,
    pub entries: u64,
    pub bits: u32,
}

/// A header the program declares: its fields, most significant first, in bits (a whole
/// number of bytes in all).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderType {
    pub name: String,
    pub fields: Vec<(String, u32)>,
}

impl HeaderType {
    /// Its length in bytes.
    pub fn bytes(&self) -> usize {
        (self.fields.iter().map(|f| f.1).sum::<u32>() / 8) as usize
    }
}

/// A parser state the program adds to the built-in ones (ethernet → ipv4 → tcp | udp): once
/// header `after` is extracted, if `select` equals `value`, header `extract` follows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParserState {
    pub after: String,
    pub select: String,
    pub value: u64,
    pub extract: String,
}

/// The built-in parser's headers.
pub const BUILTIN_HEADERS: [&str; 4] = ["ethernet", "ipv4", "tcp", "udp"];

/// The longest program file [`Program::load`] reads.
pub const MAX_PROGRAM_BYTES: u64 = 16 << 20;

/// A checked program.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Program {
    pub name: String,
    /// Its id in the CLIP header.
    pub id: u16,
    /// The remote handler's name (None: the program never sends to a server).
    pub handler: Option<String>,
    pub request: Vec<(String, u32)>,
    pub response: Vec<(String, u32)>,
    pub metadata: Vec<(String, u32)>,
    pub registers: Vec<Register>,
    pub tables: Vec<Table>,
    pub actions: Vec<Action>,
    /// The controls: table or action names, applied in order.
    pub pre_processing: Vec<String>,
    pub post_processing: Vec<String>,
    /// Each step's guard (`"nat if meta.ingress_port == 1"`): applied only when it holds.
    pub pre_guards: Vec<Option<Guard>>,
    pub post_guards: Vec<Option<Guard>>,
    /// Headers it declares, and the parser states that extract them.
    pub headers: Vec<HeaderType>,
    pub parser: Vec<ParserState>,
}

/// A step's condition: a field equal (or not) to a constant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Guard {
    pub field: String,
    pub equal: bool,
    pub value: u64,
}

/// Splits a control's step into its name and guard: `NAME` or `NAME if FIELD == VALUE` (or
/// `!=`; VALUE decimal or 0x hex); the field checked against `known`.
fn split_step(control: &str, step: &str, known: &BTreeMap<String, u32>) -> Result<(String, Option<Guard>), String> {
    let Some((name, cond)) = step.split_once(" if ") else { return Ok((step.trim().to_string(), None)) };
    let g = parse_guard(&format!("{control}: step `{step}`"), cond, known)?;
    Ok((name.trim().to_string(), Some(g)))
}

/// A condition `FIELD == VALUE` or `FIELD != VALUE` (VALUE decimal or 0x hex), the field
/// checked against `known`; errors begin with `what`.
fn parse_guard(what: &str, cond: &str, known: &BTreeMap<String, u32>) -> Result<Guard, String> {
    let bad = || format!("{what}: a guard is `FIELD == VALUE` or `FIELD != VALUE`");
    let (field, equal, value) = if let Some((f, v)) = cond.split_once("==") {
        (f.trim(), true, v.trim())
    } else if let Some((f, v)) = cond.split_once("!=") {
        (f.trim(), false, v.trim())
    } else {
        return Err(bad());
    };
    let width = *known.get(field).ok_or_else(|| format!("{what}: `{field}` is not a field"))?;
    let value = match value.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => value.parse::<u64>(),
    }
    .map_err(|_| bad())?;
    if width < 64 && value >> width != 0 {
        return Err(format!("{what}: {value} is wider than `{field}` ({width} bits)"));
    }
    Ok(Guard { field: field.to_string(), equal, value })
}

fn check_name(what: &str, name: &str) -> Result<(), String> {
    if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        return Err(format!("{what} `{name}`: a name is letters, digits and `_`"));
    }
    Ok(())
}

fn fields(what: &str, raw: &[RawField], prefix: &str) -> Result<Vec<(String, u32)>, String> {
    let mut out: Vec<(String, u32)> = Vec::new();
    for f in raw {
        check_name(what, &f.name)?;
        if !(1..=64).contains(&f.bits) {
            return Err(format!("{what} `{}`: {} bits (1 to 64)", f.name, f.bits));
        }
        let full = format!("{prefix}{}", f.name);
        if out.iter().any(|(n, _)| *n == full) {
            return Err(format!("{what} `{}` is declared twice", f.name));
        }
        out.push((full, f.bits));
    }
    Ok(out)
}

/// The most entries a register array may have: 2^24, more than one stage of a Tofino pipe
/// holds at one bit an entry (a register array lives in one stage). Its cells are made when the
/// program is loaded.
pub const MAX_REGISTER_ENTRIES: u64 = 1 << 24;

impl Program {
    /// Parses and checks a program; an error names the item.
    pub fn parse(text: &str) -> Result<Program, String> {
        let raw: Raw = toml::from_str(text).map_err(|e| e.message().to_string())?;
        check_name("program", &raw.name)?;
        let request = fields("request parameter", &raw.request, "req.")?;
        let response = fields("response parameter", &raw.response, "res.")?;
        for (what, f) in [("request", &request), ("response", &response)] {
            let bytes: u32 = f.iter().map(|(_, b)| b.div_ceil(8)).sum();
            if bytes > MAX_PARAM_BYTES {
                return Err(format!("{what}: {bytes} bytes of parameters; a CLIP header carries {MAX_PARAM_BYTES}"));
            }
        }
        let metadata = fields("metadata", &raw.metadata, "meta.")?;
        if let Some((n, _)) = metadata.iter().find(|(n, _)| HEADER_FIELDS.iter().any(|(h, _)| h == n)) {
            return Err(format!("metadata `{n}` is standard metadata already"));
        }
        let mut registers = Vec::new();
        for r in &raw.register {
            check_name("register", &r.name)?;
            if registers.iter().any(|x: &Register| x.name == r.name) {
                return Err(format!("register `{}` is declared twice", r.name));
            }
            if !(1..=MAX_REGISTER_ENTRIES).contains(&r.entries) || !matches!(r.bits, 1 | 8 | 16 | 32 | 64) {
                return Err(format!(
                    "register `{}`: {} entries of {} bits (entries 1 to {MAX_REGISTER_ENTRIES}; bits 1, 8, 16, 32 or 64)",
                    r.name, r.entries, r.bits
                ));
            }
            registers.push(Register { name: r.name.clone(), entries: r.entries, bits: r.bits });
        }
        // Every field the program may name, with its width.
        let mut known: BTreeMap<String, u32> = HEADER_FIELDS.iter().map(|&(n, b)| (n.to_string(), b)).collect();
        for (n, b) in request.iter().chain(&response).chain(&metadata) {
            known.insert(n.clone(), *b);
        }
        let mut headers: Vec<HeaderType> = Vec::new();
        for h in &raw.header {
            check_name("header", &h.name)?;
            if BUILTIN_HEADERS.contains(&h.name.as_str())
                || ["req", "res", "meta", "param"].contains(&h.name.as_str())
                || headers.iter().any(|x| x.name == h.name)
            {
                return Err(format!("header `{}`: the name is taken", h.name));
            }
            let fields = fields(&format!("header `{}`: field", h.name), &h.fields, &format!("{}.", h.name))?;
            let bits: u32 = fields.iter().map(|f| f.1).sum();
            if bits == 0 || !bits.is_multiple_of(8) || bits > 8 * 64 {
                return Err(format!("header `{}`: {bits} bits (a whole number of bytes, at most 64)", h.name));
            }
            for (n, b) in &fields {
                known.insert(n.clone(), *b);
            }
            headers.push(HeaderType {
                name: h.name.clone(),
                fields: fields
                    .into_iter()
                    .map(|(n, b)| (n.trim_start_matches(&format!("{}.", h.name)).to_string(), b))
                    .collect(),
            });
        }
        let mut parser: Vec<ParserState> = Vec::new();
        for st in &raw.parser {
            let what = format!("parser state extracting `{}`", st.extract);
            let declared = |n: &str| headers.iter().any(|h| h.name == n);
            if !BUILTIN_HEADERS.contains(&st.after.as_str()) && !declared(&st.after) {
                return Err(format!("{what}: `after` = `{}` is not a header", st.after));
            }
            if !declared(&st.extract) {
                return Err(format!("{what}: `{}` is not a declared header", st.extract));
            }
            if parser.iter().any(|p| p.extract == st.extract) {
                return Err(format!("{what}: another state extracts it (a header is extracted once)"));
            }
            let w =
                *known.get(&st.select).ok_or_else(|| format!("{what}: `select` = `{}` is not a field", st.select))?;
            if !st.select.starts_with(&format!("{}.", st.after)) {
                return Err(format!("{what}: `select` = `{}` is not a field of `{}`", st.select, st.after));
            }
            if w < 64 && st.value >> w != 0 {
                return Err(format!("{what}: `value` = {} is wider than `{}` ({w} bits)", st.value, st.select));
            }
            parser.push(ParserState {
                after: st.after.clone(),
                select: st.select.clone(),
                value: st.value,
                extract: st.extract.clone(),
            });
        }
        // No loops: following `after` back from any state reaches a built-in header.
        for st in &parser {
            let mut at = st.after.as_str();
            let mut steps = 0;
            while !BUILTIN_HEADERS.contains(&at) {
                steps += 1;
                match parser.iter().find(|p| p.extract == at) {
                    Some(p) if steps <= parser.len() => at = p.after.as_str(),
                    Some(_) => return Err(format!("parser: the states extracting `{}` form a loop", st.extract)),
                    None => {
                        return Err(format!("parser: no state extracts `{at}`, which `{}` follows", st.extract));
                    }
                }
            }
        }
        let mut actions: Vec<Action> = Vec::new();
        for a in &raw.action {
            check_name("action", &a.name)?;
            if actions.iter().any(|x| x.name == a.name) {
                return Err(format!("action `{}` is declared twice", a.name));
            }
            let params = fields(&format!("action `{}`: parameter", a.name), &a.params, "param.")?;
            let mut scope = known.clone();
            for (n, b) in &params {
                scope.insert(n.clone(), *b);
            }
            let ops = a
                .ops
                .iter()
                .enumerate()
                .map(|(i, t)| op(t, &scope, &registers).map_err(|e| format!("action `{}`: op {}: {e}", a.name, i + 1)))
                .collect::<Result<Vec<_>, _>>()?;
            actions.push(Action {
                name: a.name.clone(),
                params: params.into_iter().map(|(n, b)| (n.trim_start_matches("param.").to_string(), b)).collect(),
                ops,
            });
        }
        let mut tables: Vec<Table> = Vec::new();
        for t in &raw.table {
            check_name("table", &t.name)?;
            if tables.iter().any(|x| x.name == t.name) || actions.iter().any(|x| x.name == t.name) {
                return Err(format!("table `{}`: the name is taken", t.name));
            }
            if t.size == 0 {
                return Err(format!("table `{}`: size 0", t.name));
            }
            let mut key = Vec::new();
            for k in &t.key {
                if !known.contains_key(&k.field) {
                    return Err(format!("table `{}`: key field `{}` is not a field", t.name, k.field));
                }
                let kind = match k.kind.as_str() {
                    "exact" => MatchKind::Exact,
                    "lpm" => MatchKind::Lpm,
                    "ternary" => MatchKind::Ternary,
                    other => return Err(format!("table `{}`: match `{other}` (exact, lpm or ternary)", t.name)),
                };
                key.push((k.field.clone(), kind));
            }
            if key.iter().filter(|k| k.1 == MatchKind::Lpm).count() > 1 {
                return Err(format!("table `{}`: more than one lpm key", t.name));
            }
            for a in t.actions.iter().chain(std::iter::once(&t.default)) {
                if !actions.iter().any(|x| x.name == *a) {
                    return Err(format!("table `{}`: action `{a}` is not declared", t.name));
                }
            }
            if actions.iter().any(|x| x.name == t.default && !x.params.is_empty()) {
                return Err(format!(
                    "table `{}`: default action `{}` takes parameters (a miss has none)",
                    t.name, t.default
                ));
            }
            if let Some(l) = &t.learn {
                if !t.mirrored {
                    return Err(format!("table `{}`: `learn` is for a mirrored table", t.name));
                }
                if !t.actions.contains(l) {
                    return Err(format!("table `{}`: learn action `{l}` is not one of its actions", t.name));
                }
                let a = actions.iter().find(|x| x.name == *l).ok_or_else(|| format!("action `{l}` is not declared"))?;
                for (p, b) in &a.params {
                    match response.iter().find(|(n, _)| n.strip_prefix("res.") == Some(p.as_str())) {
                        Some((_, w)) if w == b => {}
                        _ => {
                            return Err(format!(
                                "table `{}`: learn action `{l}`'s parameter `{p}` ({b} bits) is not a response field of that name and width",
                                t.name
                            ));
                        }
                    }
                }
            }
            if key.is_empty() {
                return Err(format!("table `{}`: no key fields", t.name));
            }
            // `install` and `remove`: conditions on the response's fields, for a learning table.
            let condition = |what: &str, text: &Option<String>| -> Result<Option<Guard>, String> {
                let Some(text) = text else { return Ok(None) };
                if t.learn.is_none() {
                    return Err(format!("table `{}`: `{what}` is for a table that learns (`learn`)", t.name));
                }
                let g = parse_guard(&format!("table `{}`: `{what}`", t.name), text, &known)?;
                if !g.field.starts_with("res.") {
                    return Err(format!(
                        "table `{}`: `{what}` = \"{text}\": the condition is on a response field (`res.`)",
                        t.name
                    ));
                }
                Ok(Some(g))
            };
            let install = condition("install", &t.install)?;
            let remove = condition("remove", &t.remove)?;
            tables.push(Table {
                name: t.name.clone(),
                key,
                size: t.size,
                actions: t.actions.clone(),
                default: t.default.clone(),
                mirrored: t.mirrored,
                learn: t.learn.clone(),
                install,
                remove,
            });
        }
        let step_actions = |control: &str, steps: &[String]| -> Result<Vec<&Action>, String> {
            let mut out = Vec::new();
            for s in steps {
                if let Some(t) = tables.iter().find(|t| t.name == *s) {
                    for a in t.actions.iter().chain(std::iter::once(&t.default)) {
                        out.extend(actions.iter().find(|x| x.name == *a));
                    }
                } else if let Some(a) = actions.iter().find(|a| a.name == *s) {
                    if !a.params.is_empty() {
                        return Err(format!("{control}: action `{s}` takes parameters; apply it through a table"));
                    }
                    out.push(a);
                } else {
                    return Err(format!("{control}: `{s}` is neither a table nor an action"));
                }
            }
            Ok(out)
        };
        let split = |control: &str, steps: &[String]| -> Result<(Vec<String>, Vec<Option<Guard>>), String> {
            let mut names = Vec::new();
            let mut guards = Vec::new();
            for s in steps {
                let (n, g) = split_step(control, s, &known)?;
                names.push(n);
                guards.push(g);
            }
            Ok((names, guards))
        };
        let (pre_names, pre_guards) = split("pre_processing", &raw.pre_processing)?;
        let (post_names, post_guards) = split("post_processing", &raw.post_processing)?;
        let pre = step_actions("pre_processing", &pre_names)?;
        let post = step_actions("post_processing", &post_names)?;
        if let Some(a) = post.iter().find(|a| a.ops.iter().any(|o| matches!(o, Op::Flight | Op::Ecmp))) {
            return Err(format!(
                "post_processing: action `{}` sends to a server; a response would go back to one (a loop)",
                a.name
            ));
        }
        let flies = pre.iter().any(|a| a.ops.iter().any(|o| matches!(o, Op::Flight | Op::Ecmp)));
        if flies && raw.handler.is_none() {
            return Err("pre_processing sends to a server but the program names no `handler`".into());
        }
        if let Some(h) = &raw.handler {
            check_name("handler", h)?;
        }
        Ok(Program {
            name: raw.name,
            id: raw.program,
            handler: raw.handler,
            request,
            response,
            metadata,
            registers,
            tables,
            actions,
            pre_processing: pre_names,
            post_processing: post_names,
            pre_guards,
            post_guards,
            headers,
            parser,
        })
    }

    /// Loads and checks a program file (a regular file of at most [`MAX_PROGRAM_BYTES`]); an
    /// error names the file and the item.
    pub fn load(path: &std::path::Path) -> Result<Program, String> {
        let text = tern_wire::read_regular_text(path, MAX_PROGRAM_BYTES)?;
        Program::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    /// A field's width in bits (header, metadata, request or response fields).
    pub fn width(&self, field: &str) -> Option<u32> {
        HEADER_FIELDS
            .iter()
            .find(|(n, _)| *n == field)
            .map(|(_, b)| *b)
            .or_else(|| {
                self.request
                    .iter()
                    .chain(&self.response)
                    .chain(&self.metadata)
                    .find(|(n, _)| n == field)
                    .map(|(_, b)| *b)
            })
            .or_else(|| {
                let (h, f) = field.split_once('.')?;
                self.headers.iter().find(|x| x.name == h)?.fields.iter().find(|x| x.0 == f).map(|x| x.1)
            })
    }

    /// Every field of its declared headers, `HEADER.FIELD` with its width.
    pub fn header_fields(&self) -> Vec<(String, u32)> {
        self.headers.iter().flat_map(|h| h.fields.iter().map(move |(f, b)| (format!("{}.{f}", h.name), *b))).collect()
    }

    fn action(&self, name: &str) -> Option<&Action> {
        self.actions.iter().find(|a| a.name == name)
    }

    /// The items to place, in control order (`pre_processing`, then `post_processing`): each
    /// table with its key, size, action data (its widest action's parameters), the fields its
    /// actions read and write and their primitives; each action applied on its own as a table
    /// of no key and no entries; each register array with the first item whose actions use
    /// it, in that item's stage (its stateful ALU runs with the item's action).
    pub fn items(&self) -> Vec<Item> {
        let mut items = Vec::new();
        let mut placed_regs: Vec<&str> = Vec::new();
        for (control, steps, guards) in
            [("pre", &self.pre_processing, &self.pre_guards), ("post", &self.post_processing, &self.post_guards)]
        {
            for (i, step) in steps.iter().enumerate() {
                let (name, key, size, acts): (String, Keys, u64, Vec<&Action>) = match self
                    .tables
                    .iter()
                    .find(|t| t.name == *step)
                {
                    Some(t) => (
                        t.name.clone(),
                        t.key.iter().map(|(f, k)| (f.clone(), u64::from(self.width(f).unwrap_or(0)), *k)).collect(),
                        t.size,
                        t.actions.iter().chain(std::iter::once(&t.default)).filter_map(|a| self.action(a)).collect(),
                    ),
                    None => (format!("{control}.{step}"), Vec::new(), 0, self.action(step).into_iter().collect()),
                };
                // A guard reads its field before the step runs (a gateway: a match dependency).
                let mut reads: Vec<String> =
                    guards.get(i).and_then(Option::as_ref).map(|g| g.field.clone()).into_iter().collect();
                let mut writes = Vec::new();
                let mut regs: Vec<(&str, Vec<String>, Vec<String>)> = Vec::new();
                for a in &acts {
                    for o in &a.ops {
                        let (r, w) = op_fields(o);
                        reads.extend(r.iter().filter(|f| !f.starts_with("param.")).cloned());
                        writes.extend(w.iter().cloned());
                        if let Some(reg) = op_register(o)
                            && !placed_regs.contains(&reg)
                        {
                            regs.push((reg, r, w));
                        }
                    }
                }
                let action_bits =
                    acts.iter().map(|a| a.params.iter().map(|p| u64::from(p.1)).sum::<u64>()).max().unwrap_or(0);
                let primitives = acts.iter().map(|a| a.ops.len() as u64).sum();
                let mut registers: Vec<String> =
                    acts.iter().flat_map(|a| a.ops.iter().filter_map(op_register)).map(str::to_string).collect();
                registers.dedup();
                items.push(Item::Table(TableSpec {
                    name: name.clone(),
                    keys: key,
                    entries: size,
                    action_bits,
                    reads,
                    writes,
                    primitives,
                    registers,
                }));
                for (reg, r, w) in regs {
                    if placed_regs.contains(&reg) {
                        continue;
                    }
                    placed_regs.push(reg);
                    if let Some(def) = self.registers.iter().find(|x| x.name == reg) {
                        items.push(Item::Register(RegisterSpec {
                            name: def.name.clone(),
                            entries: def.entries,
                            bits: u64::from(def.bits),
                            reads: r.into_iter().filter(|f| !f.starts_with("param.")).collect(),
                            writes: w,
                            owner: Some(name.clone()),
                        }));
                    }
                }
            }
        }
        items
    }

    /// Its tables and registers placed in `model`'s stages.
    pub fn placement(&self, model: &tern_hw::switch::SwitchModel) -> Result<place::Placement, place::PlaceError> {
        place::place(model, &self.items())
    }
}

/// A placement item's key fields: name, bits, how matched.
type Keys = Vec<(String, u64, MatchKind)>;

/// The fields an operation reads and writes.
fn op_fields(o: &Op) -> (Vec<String>, Vec<String>) {
    let f = |x: &Operand| match x {
        Operand::Field(s) => vec![s.clone()],
        Operand::Const(_) => vec![],
    };
    match o {
        Op::Set { dst, src } => (f(src), vec![dst.clone()]),
        Op::Alu { dst, a, b, .. } => ([f(a), f(b)].concat(), vec![dst.clone()]),
        Op::Hash { dst, fields } => (fields.clone(), vec![dst.clone()]),
        Op::RegRead { index, dst, .. } => (f(index), vec![dst.clone()]),
        Op::RegWrite { index, src, .. } => ([f(index), f(src)].concat(), vec![]),
        Op::RegAdd { index, value, dst, .. } => ([f(index), f(value)].concat(), dst.iter().cloned().collect()),
        Op::RegAdvance { index, value, dst, .. } => ([f(index), f(value)].concat(), vec![dst.clone()]),
        Op::Egress { port } => (f(port), vec!["meta.egress_port".into()]),
        Op::Ecmp | Op::Flight => (vec![], vec!["meta.flight".into()]),
        Op::Drop => (vec![], vec![]),
    }
}

fn op_register(o: &Op) -> Option<&str> {
    match o {
        Op::RegRead { register, .. }
        | Op::RegWrite { register, .. }
        | Op::RegAdd { register, .. }
        | Op::RegAdvance { register, .. } => Some(register),
        _ => None,
    }
}

/// One operation from its table, its fields checked against `scope` and registers against
/// `registers`.
fn op(t: &toml::Table, scope: &BTreeMap<String, u32>, registers: &[Register]) -> Result<Op, String> {
    let kind = t.get("op").and_then(|v| v.as_str()).ok_or("no `op`")?;
    let allowed: &[&str] = match kind {
        "set" => &["op", "dst", "src"],
        "add" | "sub" | "and" | "or" | "xor" => &["op", "dst", "a", "b"],
        "hash" => &["op", "dst", "fields"],
        "reg_read" => &["op", "register", "index", "dst"],
        "reg_write" => &["op", "register", "index", "src"],
        "reg_add" | "reg_advance" => &["op", "register", "index", "value", "dst"],
        "egress" => &["op", "port"],
        "ecmp" | "flight" | "drop" => &["op"],
        other => {
            return Err(format!(
                "`{other}` is not an operation (set, add, sub, and, or, xor, hash, reg_read, reg_write, reg_add, reg_advance, egress, ecmp, flight, drop)"
            ));
        }
    };
    if let Some(k) = t.keys().find(|k| !allowed.contains(&k.as_str())) {
        return Err(format!("`{kind}` takes no `{k}`"));
    }
    let field = |key: &str| -> Result<String, String> {
        let name = t.get(key).and_then(|v| v.as_str()).ok_or_else(|| format!("`{kind}` needs `{key}`, a field"))?;
        if !scope.contains_key(name) {
            return Err(format!("`{name}` is not a field"));
        }
        if name.starts_with("param.") && key == "dst" {
            return Err(format!("`{name}`: an action's parameter cannot be written"));
        }
        Ok(name.to_string())
    };
    let operand = |key: &str, width: u32| -> Result<Operand, String> {
        match t.get(key) {
            Some(toml::Value::Integer(i)) => {
                let v = u64::try_from(*i).map_err(|_| format!("`{key}` = {i}: negative"))?;
                if width < 64 && v >> width != 0 {
                    return Err(format!("`{key}` = {v}: wider than {width} bits"));
                }
                Ok(Operand::Const(v))
            }
            Some(toml::Value::String(s)) => {
                if let Some(hex) = s.strip_prefix("0x") {
                    let v = u64::from_str_radix(hex, 16).map_err(|_| format!("`{key}` = {s}: not a number"))?;
                    if width < 64 && v >> width != 0 {
                        return Err(format!("`{key}` = {s}: wider than {width} bits"));
                    }
                    return Ok(Operand::Const(v));
                }
                if !scope.contains_key(s.as_str()) {
                    return Err(format!("`{s}` is not a field"));
                }
                Ok(Operand::Field(s.clone()))
            }
            _ => Err(format!("`{kind}` needs `{key}`, a field or a number")),
        }
    };
    let register = || -> Result<(String, u32, u64), String> {
        let name = t.get("register").and_then(|v| v.as_str()).ok_or_else(|| format!("`{kind}` needs `register`"))?;
        let r =
            registers.iter().find(|r| r.name == name).ok_or_else(|| format!("register `{name}` is not declared"))?;
        Ok((name.to_string(), r.bits, r.entries))
    };
    let width_of = |f: &str| scope.get(f).copied().unwrap_or(64);
    // A register's index: a field, or a constant below its entries.
    let index = |entries: u64| -> Result<Operand, String> {
        let o = operand("index", 64)?;
        if let Operand::Const(v) = o
            && v >= entries
        {
            return Err(format!("`index` = {v}: the register has {entries} entries"));
        }
        Ok(o)
    };
    Ok(match kind {
        "set" => {
            let dst = field("dst")?;
            Op::Set { src: operand("src", width_of(&dst))?, dst }
        }
        "add" | "sub" | "and" | "or" | "xor" => {
            let dst = field("dst")?;
            let w = width_of(&dst);
            let kind = match kind {
                "add" => AluKind::Add,
                "sub" => AluKind::Sub,
                "and" => AluKind::And,
                "or" => AluKind::Or,
                _ => AluKind::Xor,
            };
            Op::Alu { kind, a: operand("a", w)?, b: operand("b", w)?, dst }
        }
        "hash" => {
            let dst = field("dst")?;
            let list = t.get("fields").and_then(|v| v.as_array()).ok_or("`hash` needs `fields`, a list of fields")?;
            let mut fields = Vec::new();
            for v in list {
                let s = v.as_str().ok_or("`fields`: each a field name")?;
                if !scope.contains_key(s) {
                    return Err(format!("`{s}` is not a field"));
                }
                fields.push(s.to_string());
            }
            if fields.is_empty() {
                return Err("`hash` of no fields".into());
            }
            Op::Hash { dst, fields }
        }
        "reg_read" => {
            let (register, _, entries) = register()?;
            Op::RegRead { index: index(entries)?, dst: field("dst")?, register }
        }
        "reg_write" => {
            let (register, bits, entries) = register()?;
            Op::RegWrite { index: index(entries)?, src: operand("src", bits)?, register }
        }
        "reg_add" => {
            let (register, bits, entries) = register()?;
            let dst = if t.contains_key("dst") { Some(field("dst")?) } else { None };
            Op::RegAdd { index: index(entries)?, value: operand("value", bits)?, dst, register }
        }
        "reg_advance" => {
            let (register, bits, entries) = register()?;
            Op::RegAdvance { index: index(entries)?, value: operand("value", bits)?, dst: field("dst")?, register }
        }
        "egress" => Op::Egress { port: operand("port", 9)? },
        "ecmp" => Op::Ecmp,
        "flight" => Op::Flight,
        _ => Op::Drop,
    })
}
