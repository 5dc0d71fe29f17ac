//! The naive evaluator: decode the request's fields, then try the rules one by one in file order,
//! each condition by its plain meaning (`starts_with`, `ends_with`, a byte-by-byte pattern walk).
//!
//! This is both the reference twin the compiled [`super::Machine`] is property-tested against and
//! the paper's software straw man ("a match against the configured rules in a for loop in each
//! skip-and-check", §5.2 footnote 5) that the `sw-ring` and `sw-uds` baselines and the matcher
//! benchmark run.

use tern_wire::tlv::Reader;

use super::Decision;
use crate::rules::pattern::PatOp;
use crate::rules::{CondKind, RequestTypes, Rule, RuleSet};

/// Whether `value` satisfies a condition; `delimiter` is what `*` skips to.
pub fn holds(kind: &CondKind, value: &[u8], delimiter: u8) -> bool {
    match kind {
        CondKind::Exact(b) => value == b.as_slice(),
        CondKind::Prefix(b) => value.starts_with(b),
        CondKind::Suffix(b) => value.ends_with(b),
        CondKind::Contains(b) => b.is_empty() || value.windows(b.len()).any(|w| w == b.as_slice()),
        CondKind::Pattern(ops) => {
            let mut at = 0usize;
            for op in ops {
                match op {
                    PatOp::Skip(n) => at += *n as usize,
                    PatOp::ToDelim => match value.get(at..).and_then(|v| v.iter().position(|&c| c == delimiter)) {
                        Some(i) => at += i + 1,
                        None => return false,
                    },
                    PatOp::Check(b) => {
                        if value.get(at..).is_none_or(|v| !v.starts_with(b)) {
                            return false;
                        }
                        at += b.len();
                    }
                }
            }
            true
        }
    }
}

/// Whether a rule matches a request whose field values `field` returns (`None`: absent).
pub fn rule_matches<'a>(rule: &Rule, delimiter: u8, field: impl Fn(u8) -> Option<&'a [u8]>) -> bool {
    rule.conditions.iter().all(|c| field(c.field).is_some_and(|v| holds(&c.kind, v, delimiter)))
}

/// The naive matcher: per request, decode every TLV record of the payload, then loop over the
/// application's rules.
#[derive(Debug, Clone)]
pub struct NaiveMatcher {
    delimiter: u8,
    /// Per app id: default queue, rules in order, request types.
    apps: Vec<Option<(u16, Vec<Rule>, RequestTypes)>>,
}

impl NaiveMatcher {
    /// Takes a checked rule set.
    pub fn new(set: &RuleSet) -> NaiveMatcher {
        let mut apps = vec![None; 256];
        for app in &set.apps {
            apps[app.id as usize] =
                Some((app.default_queue, set.rules_of(app.id).cloned().collect(), app.request_types()));
        }
        NaiveMatcher { delimiter: set.delimiter, apps }
    }

    /// Decides a request: `None` if its application is not configured. `fields` is scratch
    /// space for the decoded records (field, start, end), kept by the caller so the loop does
    /// not allocate.
    pub fn decide(
        &self,
        app_id: u8,
        req_type: u8,
        payload: &[u8],
        fields: &mut Vec<(u8, usize, usize)>,
    ) -> Option<Decision> {
        let (default_queue, rules, _) = self.apps[app_id as usize].as_ref()?;
        Some(decide_rules(rules, *default_queue, self.delimiter, req_type, payload, fields))
    }

    /// One application's rules, for a dispatcher that holds applications separately.
    pub fn app(&self, app_id: u8) -> Option<NaiveApp> {
        let (default_queue, rules, types) = self.apps[app_id as usize].as_ref()?;
        Some(NaiveApp {
            delimiter: self.delimiter,
            default_queue: *default_queue,
            rules: rules.clone(),
            types: types.clone(),
        })
    }
}

/// The naive matcher of one application.
#[derive(Debug, Clone)]
pub struct NaiveApp {
    delimiter: u8,
    default_queue: u16,
    rules: Vec<Rule>,
    types: RequestTypes,
}

impl NaiveApp {
    /// The application's request types.
    pub fn request_types(&self) -> &RequestTypes {
        &self.types
    }

    /// Decides a request of this application (see [`NaiveMatcher::decide`]).
    pub fn decide(&self, req_type: u8, payload: &[u8], fields: &mut Vec<(u8, usize, usize)>) -> Decision {
        decide_rules(&self.rules, self.default_queue, self.delimiter, req_type, payload, fields)
    }
}

fn decide_rules(
    rules: &[Rule],
    default_queue: u16,
    delimiter: u8,
    req_type: u8,
    payload: &[u8],
    fields: &mut Vec<(u8, usize, usize)>,
) -> Decision {
    // Decode the whole request (up to the first malformed record).
    fields.clear();
    let base = payload.as_ptr() as usize;
    for rec in Reader::new(payload) {
        let Ok(rec) = rec else { break };
        let start = rec.value.as_ptr() as usize - base;
        fields.push((rec.field, start, start + rec.value.len()));
    }
    let lookup = |f: u8| fields.iter().find(|(n, _, _)| *n == f).map(|&(_, a, b)| &payload[a..b]);
    for rule in rules.iter().filter(|r| r.req_type == req_type) {
        if rule_matches(rule, delimiter, lookup) {
            return Decision { queue: rule.queue, rule: Some(rule.index as u32) };
        }
    }
    Decision { queue: default_queue, rule: None }
}
