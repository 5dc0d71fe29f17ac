//! L7 dispatch rules: the rule file, its validation against the IDL, and precedence.
//!
//! A rule file (TOML, `docs/rules.md`) names the IDL file, the applications (QNP `app_id`, the
//! request messages and their `req_type`, a default queue) and an ordered list of rules. A rule
//! names an application, a request message and a queue, and puts one condition on each dispatch
//! field it cares about: a skip-and-check `pattern`, or `exact`, `prefix`, `suffix`, `contains`.
//! Rules are tried in file order and the first whose conditions all hold decides the queue; a
//! request no rule matches goes to its application's default queue.
//!
//! [`RuleSet::from_config`] checks everything it can without a profile (names, fields, patterns,
//! queues) and warns about rules an earlier rule shadows; [`crate::matcher`] compiles a checked
//! rule set into the matcher's state machine and checks it against a profile.
//!
//! ```
//! use tern_dispatch::rules::{DispatchConfig, RuleSet};
//! let idl = tern_idl::parse_str("kv.proto", r#"
//!     syntax = "proto3";
//!     import "tern/qingniao.proto";
//!     message Get { string key = 1 [(tern.dispatch) = true]; }
//! "#).unwrap();
//! let cfg: DispatchConfig = toml::from_str(r#"
//!     idl = "kv.proto"
//!     [[app]]
//!     name = "kv"
//!     id = 1
//!     requests = { Get = 1 }
//!     [[rule]]
//!     app = "kv"
//!     request = "Get"
//!     queue = 2
//!     match = { key = "user.{4}A" }
//! "#).unwrap();
//! let set = RuleSet::from_config(&cfg, &idl).unwrap();
//! assert_eq!(set.rules[0].queue, 2);
//! ```

pub mod pattern;

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;

use serde::Deserialize;
use tern_idl::{FieldType, MessageSchema, Schema};

use pattern::{DisplayPattern, PatOp, escape, parse_literal, parse_pattern};

/// Delimiter a `*` skips to unless the file says otherwise (the authors' artifact uses `$`).
pub const DEFAULT_DELIMITER: u8 = b'$';

/// A rule file as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DispatchConfig {
    /// The IDL (`.proto`) file, relative to the rule file.
    pub idl: PathBuf,
    /// The byte `*` in patterns skips to (one ASCII character).
    #[serde(default)]
    pub delimiter: Option<String>,
    /// Applications.
    #[serde(default, rename = "app")]
    pub apps: Vec<AppConfig>,
    /// Rules, in precedence order.
    #[serde(default, rename = "rule")]
    pub rules: Vec<RuleConfig>,
    /// How `tern dispatch serve` runs (ignored by rule checks except for the queue count).
    #[serde(default)]
    pub server: Option<ServerConfig>,
}

/// One application.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AppConfig {
    /// Name rules refer to.
    pub name: String,
    /// QNP `app_id`.
    pub id: u8,
    /// Queue (worker) for requests no rule matches.
    #[serde(default)]
    pub default_queue: u16,
    /// Request message name → QNP `req_type`.
    pub requests: BTreeMap<String, u8>,
}

/// One rule as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RuleConfig {
    /// Name for messages; `rule N` (1-based file position) if absent.
    #[serde(default)]
    pub name: Option<String>,
    /// Application name.
    pub app: String,
    /// Request message name.
    pub request: String,
    /// Queue (worker index) a matching request goes to.
    pub queue: u16,
    /// Field name → condition. No conditions: the rule matches every request of its type.
    #[serde(default, rename = "match")]
    pub conditions: BTreeMap<String, ConditionConfig>,
}

/// A condition as written: a pattern string, or a table with one form.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum ConditionConfig {
    /// A skip-and-check pattern.
    Pattern(String),
    /// `{ exact = ... }`, `{ prefix = ... }`, `{ suffix = ... }`, `{ contains = ... }` or
    /// `{ pattern = ... }`.
    Form(FormConfig),
}

/// The table form of a condition.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FormConfig {
    /// The whole value equals this (a string literal, or an integer for integer fields).
    #[serde(default)]
    pub exact: Option<Literal>,
    /// The value starts with this.
    #[serde(default)]
    pub prefix: Option<String>,
    /// The value ends with this (software only).
    #[serde(default)]
    pub suffix: Option<String>,
    /// The value contains this (software only).
    #[serde(default)]
    pub contains: Option<String>,
    /// A skip-and-check pattern.
    #[serde(default)]
    pub pattern: Option<String>,
}

/// A literal: a string (with `\xNN` escapes) or an integer.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum Literal {
    /// An integer, encoded as the field's type is.
    Int(i64),
    /// Bytes.
    Str(String),
}

/// How `tern dispatch serve` runs.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Address the service listens on.
    #[serde(default = "default_listen")]
    pub listen: String,
    /// Worker threads; rules' queues index them.
    pub workers: u16,
    /// Receive-side dispatcher threads.
    #[serde(default = "default_rsds")]
    pub rsds: u16,
    /// Hardware profile (built-in name or TOML path).
    #[serde(default)]
    pub profile: Option<String>,
    /// Application served by the workers (`kv`, `pingpong`).
    #[serde(default)]
    pub service: Option<String>,
    /// Keys the KV service loads.
    #[serde(default)]
    pub keys: Option<u64>,
    /// Request-table entries of each worker (default: the profile's total split among the
    /// workers, or 65536 each under `cpu`).
    #[serde(default)]
    pub request_table_entries: Option<usize>,
    /// Most packets per request (default: the profile's limit, or 255 under `cpu`).
    #[serde(default)]
    pub max_pkts_per_request: Option<u8>,
}

fn default_listen() -> String {
    "127.0.0.1:7000".to_string()
}

fn default_rsds() -> u16 {
    1
}

/// A checked application.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct App {
    /// Name.
    pub name: String,
    /// QNP `app_id`.
    pub id: u8,
    /// Queue for requests no rule matches.
    pub default_queue: u16,
    /// (message, `req_type`) pairs.
    pub requests: Vec<(MessageSchema, u8)>,
}

impl App {
    /// The message a request type carries.
    pub fn message(&self, req_type: u8) -> Option<&MessageSchema> {
        self.requests.iter().find(|(_, t)| *t == req_type).map(|(m, _)| m)
    }

    /// The request types this application declares, with their dispatch fields.
    pub fn request_types(&self) -> RequestTypes {
        let mut types = vec![None; 256];
        for (m, t) in &self.requests {
            types[usize::from(*t)] = Some(m.dispatch_fields().into_boxed_slice());
        }
        RequestTypes(types.into_boxed_slice())
    }
}

/// The request types of one application (`requests = { Message = req_type }`), each with the
/// dispatch fields its message declares (ascending field numbers): what a dispatcher checks a
/// first packet against before deciding it (`docs/qnp.md` §4).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestTypes(Box<[Option<Box<[u8]>>]>);

impl RequestTypes {
    /// The dispatch fields of `req_type`, or `None` if the application does not declare it.
    #[inline]
    pub fn dispatch_fields(&self, req_type: u8) -> Option<&[u8]> {
        self.0.get(usize::from(req_type)).and_then(|f| f.as_deref())
    }
}

/// What a condition asks of a field's value.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CondKind {
    /// Skip-and-check pattern: the value has these bytes at these places (more may follow).
    Pattern(Vec<PatOp>),
    /// The value is exactly these bytes.
    Exact(Vec<u8>),
    /// The value starts with these bytes.
    Prefix(Vec<u8>),
    /// The value ends with these bytes.
    Suffix(Vec<u8>),
    /// The value contains these bytes.
    Contains(Vec<u8>),
}

impl fmt::Display for CondKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CondKind::Pattern(ops) => write!(f, "pattern \"{}\"", DisplayPattern(ops)),
            CondKind::Exact(b) => write!(f, "exact \"{}\"", escape(b, false)),
            CondKind::Prefix(b) => write!(f, "prefix \"{}\"", escape(b, false)),
            CondKind::Suffix(b) => write!(f, "suffix \"{}\"", escape(b, false)),
            CondKind::Contains(b) => write!(f, "contains \"{}\"", escape(b, false)),
        }
    }
}

/// A condition on one dispatch field.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Condition {
    /// Field number (the TLV type).
    pub field: u8,
    /// Field name.
    pub field_name: String,
    /// What the value must be.
    pub kind: CondKind,
}

/// A checked rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Position in the file (0-based): precedence, lower first.
    pub index: usize,
    /// Name.
    pub name: String,
    /// QNP `app_id`.
    pub app_id: u8,
    /// QNP `req_type`.
    pub req_type: u8,
    /// Queue.
    pub queue: u16,
    /// Conditions, in the order their fields are encoded (field number order).
    pub conditions: Vec<Condition>,
}

/// How serious a diagnostic is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// The configuration works but probably not as meant.
    Warning,
    /// The configuration cannot be used.
    Error,
}

/// A problem found in a rule file, naming the item it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// Error or warning.
    pub severity: Severity,
    /// The item: `rule "range-03"`, `app "kv"`, `delimiter`.
    pub item: String,
    /// What is wrong.
    pub message: String,
}

impl Diagnostic {
    fn error(item: impl Into<String>, message: impl Into<String>) -> Diagnostic {
        Diagnostic { severity: Severity::Error, item: item.into(), message: message.into() }
    }
    fn warning(item: impl Into<String>, message: impl Into<String>) -> Diagnostic {
        Diagnostic { severity: Severity::Warning, item: item.into(), message: message.into() }
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sev = match self.severity {
            Severity::Warning => "warning",
            Severity::Error => "error",
        };
        write!(f, "{sev}: {}: {}", self.item, self.message)
    }
}

/// A rule file that failed its checks: every error found (and the warnings).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .0.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("\n"))]
pub struct Invalid(pub Vec<Diagnostic>);

/// A checked rule file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleSet {
    /// The byte `*` skips to.
    pub delimiter: u8,
    /// Applications.
    pub apps: Vec<App>,
    /// Rules in precedence order.
    pub rules: Vec<Rule>,
    /// Warnings (shadowed rules).
    pub warnings: Vec<Diagnostic>,
    /// Queues the server has, if the file says (`server.workers`).
    pub queues: Option<u16>,
}

impl RuleSet {
    /// Checks a rule file against its IDL. Collects every problem rather than stopping at the
    /// first.
    pub fn from_config(cfg: &DispatchConfig, schema: &Schema) -> Result<RuleSet, Invalid> {
        let mut diags = Vec::new();
        let delimiter = match cfg.delimiter.as_deref() {
            None => DEFAULT_DELIMITER,
            Some(s) if s.len() == 1 && s.is_ascii() => s.as_bytes()[0],
            Some(s) => {
                diags.push(Diagnostic::error("delimiter", format!("`{s}` must be exactly one ASCII character")));
                DEFAULT_DELIMITER
            }
        };
        let queues = cfg.server.as_ref().map(|s| s.workers);
        if queues == Some(0) {
            diags.push(Diagnostic::error("server.workers", "must be at least 1"));
        }
        let check_queue = |diags: &mut Vec<Diagnostic>, item: &str, q: u16| {
            if let Some(n) = queues
                && n > 0
                && q >= n
            {
                diags.push(Diagnostic::error(
                    item,
                    format!("queue {q} does not exist (server.workers = {n}: queues 0..{n})"),
                ));
            }
        };

        let mut apps: Vec<App> = Vec::new();
        for a in &cfg.apps {
            let item = format!("app \"{}\"", a.name);
            if apps.iter().any(|b| b.name == a.name) {
                diags.push(Diagnostic::error(&item, "is defined twice"));
                continue;
            }
            if let Some(b) = apps.iter().find(|b| b.id == a.id) {
                diags.push(Diagnostic::error(&item, format!("id {} is already used by app \"{}\"", a.id, b.name)));
            }
            check_queue(&mut diags, &format!("{item} default_queue"), a.default_queue);
            let mut requests = Vec::new();
            for (msg, &ty) in &a.requests {
                match schema.message(msg) {
                    None => diags.push(Diagnostic::error(
                        &item,
                        format!("request `{msg}` is not a message of {} (messages: {})", schema.file, names(schema)),
                    )),
                    Some(m) => {
                        if let Some((other, _)) = requests.iter().find(|(_, t)| *t == ty) {
                            let other: &MessageSchema = other;
                            diags.push(Diagnostic::error(
                                &item,
                                format!("req_type {ty} is given to both `{}` and `{msg}`", other.name),
                            ));
                        }
                        requests.push((m.clone(), ty));
                    }
                }
            }
            if a.requests.is_empty() {
                diags.push(Diagnostic::error(&item, "lists no requests (requests = { Message = req_type })"));
            }
            apps.push(App { name: a.name.clone(), id: a.id, default_queue: a.default_queue, requests });
        }

        let mut rules = Vec::new();
        for (index, r) in cfg.rules.iter().enumerate() {
            let name = r.name.clone().unwrap_or_else(|| format!("rule {}", index + 1));
            let item = format!("rule \"{name}\"");
            if rules.iter().any(|x: &Rule| x.name == name) {
                diags.push(Diagnostic::error(&item, "the name is used by an earlier rule"));
            }
            check_queue(&mut diags, &item, r.queue);
            let Some(app) = apps.iter().find(|a| a.name == r.app) else {
                let known: Vec<&str> = apps.iter().map(|a| a.name.as_str()).collect();
                diags.push(Diagnostic::error(
                    &item,
                    format!("app `{}` is not defined (apps: {})", r.app, known.join(", ")),
                ));
                continue;
            };
            let Some((msg, req_type)) = app.requests.iter().find(|(m, _)| m.name == r.request) else {
                diags.push(Diagnostic::error(
                    &item,
                    format!("request `{}` is not one of app \"{}\"'s requests", r.request, app.name),
                ));
                continue;
            };
            let mut conditions = Vec::new();
            let mut bad = false;
            for (field_name, c) in &r.conditions {
                match condition(msg, field_name, c) {
                    Ok(cond) => conditions.push(cond),
                    Err(e) => {
                        diags.push(Diagnostic::error(&item, e));
                        bad = true;
                    }
                }
            }
            // A rule with a condition in error is left out: with fewer conditions it would seem
            // to match more than it does and shadow the rules after it.
            if bad {
                continue;
            }
            conditions.sort_by_key(|c| c.field);
            rules.push(Rule { index, name, app_id: app.id, req_type: *req_type, queue: r.queue, conditions });
        }

        let warnings = shadowed(&rules);
        if diags.iter().any(|d| d.severity == Severity::Error) {
            diags.extend(warnings);
            return Err(Invalid(diags));
        }
        Ok(RuleSet { delimiter, apps, rules, warnings, queues })
    }

    /// The application with this id.
    pub fn app(&self, id: u8) -> Option<&App> {
        self.apps.iter().find(|a| a.id == id)
    }

    /// Rules of one application, in precedence order.
    pub fn rules_of(&self, app_id: u8) -> impl Iterator<Item = &Rule> {
        self.rules.iter().filter(move |r| r.app_id == app_id)
    }

    /// The highest queue any application or rule names.
    pub fn max_queue(&self) -> Option<u16> {
        self.apps.iter().map(|a| a.default_queue).chain(self.rules.iter().map(|r| r.queue)).max()
    }

    /// Replaces application `app_id` (its definition and rules) by the one in `new`, keeping the
    /// other applications. The new rules get indexes after every index in use, so counters kept
    /// by index never mix old and new rules.
    pub fn replace_app(&mut self, app_id: u8, new: &RuleSet) {
        let next = self.rules.iter().map(|r| r.index + 1).max().unwrap_or(0);
        self.apps.retain(|a| a.id != app_id);
        self.apps.extend(new.apps.iter().filter(|a| a.id == app_id).cloned());
        self.rules.retain(|r| r.app_id != app_id);
        for (i, r) in new.rules.iter().filter(|r| r.app_id == app_id).enumerate() {
            self.rules.push(Rule { index: next + i, ..r.clone() });
        }
    }

    /// A copy holding only one application and its rules (for per-application reconfiguration).
    pub fn only_app(&self, app_id: u8) -> RuleSet {
        RuleSet {
            delimiter: self.delimiter,
            apps: self.apps.iter().filter(|a| a.id == app_id).cloned().collect(),
            rules: self.rules.iter().filter(|r| r.app_id == app_id).cloned().collect(),
            warnings: Vec::new(),
            queues: self.queues,
        }
    }
}

/// A rule file that could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be read, or is not a regular file of at most [`MAX_RULE_FILE_BYTES`].
    #[error("{message}")]
    Io {
        /// The file.
        path: String,
        /// What went wrong, naming the file.
        message: String,
    },
    /// The TOML is malformed or has unknown keys.
    #[error("{path}: {message}")]
    Toml {
        /// The file.
        path: String,
        /// What and where (line, column).
        message: String,
    },
    /// The IDL file named by `idl` is invalid.
    #[error("{path}: idl: {source}")]
    Idl {
        /// The rule file.
        path: String,
        /// Cause.
        source: tern_idl::IdlError,
    },
    /// The rules did not pass their checks.
    #[error("{path}: {} error(s)\n{invalid}", invalid.0.iter().filter(|d| d.severity == Severity::Error).count())]
    Invalid {
        /// The rule file.
        path: String,
        /// Every diagnostic.
        invalid: Invalid,
    },
}

/// A loaded rule file: as written, its IDL, and the checked rules.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// As written.
    pub config: DispatchConfig,
    /// The IDL.
    pub schema: Schema,
    /// The checked rules.
    pub rules: RuleSet,
}

/// The most bytes a rule file may have (16 MiB).
pub const MAX_RULE_FILE_BYTES: u64 = tern_wire::MAX_CONFIG_BYTES;

/// Reads and checks a rule file (a regular file of at most [`MAX_RULE_FILE_BYTES`]: a device or
/// a pipe is refused unread); `idl` is resolved relative to the file.
pub fn load(path: &std::path::Path) -> Result<Loaded, LoadError> {
    let shown = path.display().to_string();
    let text = tern_wire::read_regular_text(path, MAX_RULE_FILE_BYTES)
        .map_err(|e| LoadError::Io { path: shown.clone(), message: e.to_string() })?;
    let config: DispatchConfig =
        toml::from_str(&text).map_err(|e| LoadError::Toml { path: shown.clone(), message: e.to_string() })?;
    let idl = path.parent().unwrap_or(std::path::Path::new(".")).join(&config.idl);
    let schema = tern_idl::parse_file(&idl).map_err(|source| LoadError::Idl { path: shown.clone(), source })?;
    let rules =
        RuleSet::from_config(&config, &schema).map_err(|invalid| LoadError::Invalid { path: shown, invalid })?;
    Ok(Loaded { config, schema, rules })
}

fn names(schema: &Schema) -> String {
    schema.messages.iter().map(|m| m.name.as_str()).collect::<Vec<_>>().join(", ")
}

fn condition(msg: &MessageSchema, field_name: &str, c: &ConditionConfig) -> Result<Condition, String> {
    let Some(field) = msg.field_by_name(field_name) else {
        let fields: Vec<&str> = msg.fields.iter().map(|f| f.name.as_str()).collect();
        return Err(format!("`{}` has no field `{field_name}` (fields: {})", msg.name, fields.join(", ")));
    };
    if !field.dispatch {
        return Err(format!(
            "field `{field_name}` of `{}` is not a dispatch field (mark it [(tern.dispatch) = true]); the dispatcher \
             only reads dispatch fields",
            msg.name
        ));
    }
    let at = |e: pattern::PatternError| format!("field `{field_name}`: {e}");
    let kind = match c {
        ConditionConfig::Pattern(p) => CondKind::Pattern(parse_pattern(p).map_err(at)?),
        ConditionConfig::Form(f) => {
            let given =
                [f.exact.is_some(), f.prefix.is_some(), f.suffix.is_some(), f.contains.is_some(), f.pattern.is_some()];
            if given.iter().filter(|g| **g).count() != 1 {
                return Err(format!(
                    "field `{field_name}`: give exactly one of exact, prefix, suffix, contains, pattern"
                ));
            }
            let nonempty = |s: &str, form: &str| -> Result<Vec<u8>, String> {
                let b = parse_literal(s).map_err(at)?;
                if b.is_empty() {
                    return Err(format!(
                        "field `{field_name}`: an empty {form} matches any value; leave the field out"
                    ));
                }
                Ok(b)
            };
            if let Some(lit) = &f.exact {
                CondKind::Exact(exact_bytes(field.ty, lit).map_err(|e| format!("field `{field_name}`: {e}"))?)
            } else if let Some(s) = &f.prefix {
                CondKind::Prefix(nonempty(s, "prefix")?)
            } else if let Some(s) = &f.suffix {
                CondKind::Suffix(nonempty(s, "suffix")?)
            } else if let Some(s) = &f.contains {
                CondKind::Contains(nonempty(s, "contains")?)
            } else {
                CondKind::Pattern(parse_pattern(f.pattern.as_deref().unwrap_or_default()).map_err(at)?)
            }
        }
    };
    Ok(Condition { field: field.number, field_name: field_name.to_string(), kind })
}

fn exact_bytes(ty: FieldType, lit: &Literal) -> Result<Vec<u8>, String> {
    match (lit, ty) {
        (Literal::Str(s), _) => {
            let b = parse_literal(s).map_err(|e| e.to_string())?;
            match ty.fixed_len() {
                Some(n) if b.len() != n => {
                    Err(format!("a {} value is {n} bytes, the literal is {}", ty.proto_name(), b.len()))
                }
                _ => Ok(b),
            }
        }
        (Literal::Int(v), FieldType::Int32) => {
            i32::try_from(*v).map(|v| v.to_be_bytes().to_vec()).map_err(|_| format!("{v} is out of range for int32"))
        }
        (Literal::Int(v), FieldType::Uint32) => {
            u32::try_from(*v).map(|v| v.to_be_bytes().to_vec()).map_err(|_| format!("{v} is out of range for uint32"))
        }
        (Literal::Int(v), FieldType::Int64) => Ok(v.to_be_bytes().to_vec()),
        (Literal::Int(v), FieldType::Uint64) => {
            u64::try_from(*v).map(|v| v.to_be_bytes().to_vec()).map_err(|_| format!("{v} is out of range for uint64"))
        }
        (Literal::Int(v), FieldType::Bool) => match v {
            0 | 1 => Ok(vec![*v as u8]),
            _ => Err(format!("{v} is not a bool (0 or 1)")),
        },
        (Literal::Int(_), t) => Err(format!("an integer literal cannot match a {} field", t.proto_name())),
    }
}

/// A condition as fixed-position byte constraints, where it is one.
struct Positional {
    bytes: Vec<(usize, u8)>,
    min_len: usize,
    exact_len: Option<usize>,
}

fn positional(kind: &CondKind) -> Option<Positional> {
    let mut p = Positional { bytes: Vec::new(), min_len: 0, exact_len: None };
    let mut at = 0usize;
    let push = |p: &mut Positional, at: &mut usize, b: &[u8]| {
        p.bytes.extend(b.iter().enumerate().map(|(i, &c)| (*at + i, c)));
        *at += b.len();
        p.min_len = *at;
    };
    match kind {
        CondKind::Exact(b) => {
            push(&mut p, &mut at, b);
            p.exact_len = Some(b.len());
        }
        CondKind::Prefix(b) => push(&mut p, &mut at, b),
        CondKind::Pattern(ops) => {
            for op in ops {
                match op {
                    PatOp::Skip(n) => at += *n as usize,
                    PatOp::ToDelim => return None,
                    PatOp::Check(b) => push(&mut p, &mut at, b),
                }
            }
        }
        CondKind::Suffix(_) | CondKind::Contains(_) => return None,
    }
    Some(p)
}

/// Whether every value satisfying `strong` also satisfies `weak` (conservative: `false` when
/// unsure).
fn implies(strong: &CondKind, weak: &CondKind) -> bool {
    if strong == weak {
        return true;
    }
    if let (Some(s), Some(w)) = (positional(strong), positional(weak)) {
        let len_ok = match w.exact_len {
            Some(n) => s.exact_len == Some(n),
            None => s.exact_len.unwrap_or(s.min_len) >= w.min_len,
        };
        return len_ok && w.bytes.iter().all(|wb| s.bytes.contains(wb));
    }
    match (strong, weak) {
        (CondKind::Exact(v), CondKind::Suffix(s)) => v.ends_with(s),
        (CondKind::Exact(v), CondKind::Contains(s)) => v.windows(s.len()).any(|w| w == s.as_slice()),
        (CondKind::Prefix(v), CondKind::Contains(s)) => v.windows(s.len()).any(|w| w == s.as_slice()),
        (CondKind::Pattern(ops), CondKind::Contains(s)) => {
            ops.iter().any(|op| matches!(op, PatOp::Check(v) if v.windows(s.len()).any(|w| w == s.as_slice())))
        }
        _ => false,
    }
}

/// Whether every request `later` matches, `earlier` matches too.
pub(crate) fn shadows(earlier: &Rule, later: &Rule) -> bool {
    earlier.app_id == later.app_id
        && earlier.req_type == later.req_type
        && earlier
            .conditions
            .iter()
            .all(|w| later.conditions.iter().any(|s| s.field == w.field && implies(&s.kind, &w.kind)))
}

fn shadowed(rules: &[Rule]) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    for (j, later) in rules.iter().enumerate() {
        if let Some(earlier) = rules[..j].iter().find(|e| shadows(e, later)) {
            let what = if earlier.queue == later.queue { " (same queue)" } else { "" };
            out.push(Diagnostic::warning(
                format!("rule \"{}\"", later.name),
                format!(
                    "can never match: the earlier rule \"{}\" matches every request it matches{what}",
                    earlier.name
                ),
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const IDL: &str = r#"
        syntax = "proto3";
        import "tern/qingniao.proto";
        message Get { string key = 1 [(tern.dispatch) = true]; uint32 shard = 2 [(tern.dispatch) = true]; bytes pad = 3; }
        message Put { string key = 1 [(tern.dispatch) = true]; bytes value = 2; }
    "#;

    fn set(rules: &str) -> Result<RuleSet, Invalid> {
        let schema = tern_idl::parse_str("kv.proto", IDL).unwrap();
        let text = format!(
            "idl = \"kv.proto\"\n[server]\nworkers = 4\n[[app]]\nname = \"kv\"\nid = 1\nrequests = {{ Get = 1, Put = 2 }}\n{rules}"
        );
        let cfg: DispatchConfig = toml::from_str(&text).unwrap();
        RuleSet::from_config(&cfg, &schema)
    }

    #[test]
    fn forms_parse() {
        let s = set(r#"
            [[rule]]
            app = "kv"
            request = "Get"
            queue = 1
            match = { key = { exact = "abc" }, shard = { exact = 7 } }
            [[rule]]
            name = "p"
            app = "kv"
            request = "Put"
            queue = 2
            match = { key = { contains = "x\\x00" } }
        "#)
        .unwrap();
        assert_eq!(s.rules[0].name, "rule 1");
        assert_eq!(s.rules[0].conditions[0].kind, CondKind::Exact(b"abc".to_vec()));
        assert_eq!(s.rules[0].conditions[1].kind, CondKind::Exact(vec![0, 0, 0, 7]));
        assert_eq!((s.rules[1].app_id, s.rules[1].req_type), (1, 2));
        assert_eq!(s.rules[1].conditions[0].kind, CondKind::Contains(b"x\0".to_vec()));
        assert!(s.warnings.is_empty());
    }

    #[test]
    fn errors_name_the_rule_and_the_problem() {
        let e = set(r#"
            [[rule]]
            name = "bad-field"
            app = "kv"
            request = "Get"
            queue = 1
            match = { nope = "a" }
            [[rule]]
            name = "not-dispatch"
            app = "kv"
            request = "Get"
            queue = 1
            match = { pad = "a" }
            [[rule]]
            name = "bad-queue"
            app = "kv"
            request = "Get"
            queue = 9
            [[rule]]
            name = "bad-app"
            app = "zz"
            request = "Get"
            queue = 0
            [[rule]]
            name = "bad-pattern"
            app = "kv"
            request = "Get"
            queue = 0
            match = { key = "ab.." }
            [[rule]]
            name = "two-forms"
            app = "kv"
            request = "Get"
            queue = 0
            match = { key = { prefix = "a", suffix = "b" } }
            [[rule]]
            name = "int-range"
            app = "kv"
            request = "Get"
            queue = 0
            match = { shard = { exact = -1 } }
        "#)
        .unwrap_err();
        let text = e.to_string();
        for needle in [
            "rule \"bad-field\": `Get` has no field `nope`",
            "rule \"not-dispatch\": field `pad` of `Get` is not a dispatch field",
            "rule \"bad-queue\": queue 9 does not exist",
            "rule \"bad-app\": app `zz` is not defined",
            "rule \"bad-pattern\": field `key`: the pattern ends with a skip",
            "rule \"two-forms\": field `key`: give exactly one of",
            "rule \"int-range\": field `shard`: -1 is out of range for uint32",
        ] {
            assert!(text.contains(needle), "missing `{needle}` in:\n{text}");
        }
        // The rules in error do not make the later ones "never match".
        assert!(!text.contains("can never match"), "{text}");
    }

    #[test]
    fn shadowed_rules_are_warned() {
        let s = set(r#"
            [[rule]]
            name = "broad"
            app = "kv"
            request = "Get"
            queue = 1
            match = { key = "user" }
            [[rule]]
            name = "narrow"
            app = "kv"
            request = "Get"
            queue = 2
            match = { key = "user.{3}x" }
            [[rule]]
            name = "other-type"
            app = "kv"
            request = "Put"
            queue = 2
            match = { key = "user" }
            [[rule]]
            name = "exact-under-suffix"
            app = "kv"
            request = "Put"
            queue = 2
            match = { key = { exact = "user-9" } }
            [[rule]]
            name = "two-fields"
            app = "kv"
            request = "Get"
            queue = 3
            match = { key = "x", shard = { exact = 1 } }
            [[rule]]
            name = "one-field"
            app = "kv"
            request = "Get"
            queue = 3
            match = { key = "xy" }
        "#)
        .unwrap();
        let w: Vec<String> = s.warnings.iter().map(|d| d.to_string()).collect();
        assert_eq!(w.len(), 2, "{w:?}");
        assert!(w[0].contains("rule \"narrow\": can never match: the earlier rule \"broad\""), "{w:?}");
        assert!(w[1].contains("rule \"exact-under-suffix\"") && w[1].contains("\"other-type\""), "{w:?}");
    }

    #[test]
    fn implication() {
        let p = |s: &str| CondKind::Pattern(parse_pattern(s).unwrap());
        assert!(implies(&CondKind::Exact(b"abcd".to_vec()), &p(".b.d")));
        assert!(!implies(&p(".b.d"), &CondKind::Exact(b"abcd".to_vec())));
        assert!(implies(&CondKind::Prefix(b"abc".to_vec()), &CondKind::Prefix(b"ab".to_vec())));
        assert!(!implies(&CondKind::Prefix(b"ab".to_vec()), &CondKind::Prefix(b"abc".to_vec())));
        assert!(implies(&CondKind::Exact(b"xab".to_vec()), &CondKind::Suffix(b"ab".to_vec())));
        assert!(!implies(&p("*a"), &p("a")));
        assert!(implies(&p("*ab"), &p("*ab")));
    }
}
