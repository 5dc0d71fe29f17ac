//! Synthetic rule sets along the paper's three dimensions (QingNiao §5): skip-and-checks per
//! rule, number of rules, bytes matched per check (defaults 4 / 32 / 5).
//!
//! Rule `r` is the pattern `.c1.c2...ck` on the `key` field of a `Get` request (app `kv`, id 1,
//! `req_type` 1): a 1-byte skip before each check, so a request matching it walks all `k`
//! skip-and-checks. Rules differ from their first bytes on (the rule number is written in base
//! 250 there), which is the worst case for the compiled machine relative to the naive loop: the
//! loop rejects a wrong rule at its first check. Rule `r` sends to queue `r % queues`.
//!
//! ```
//! use tern_dispatch::synth::Spec;
//! let spec = Spec::default();
//! let set = spec.rule_set(8);
//! assert_eq!(set.rules.len(), 32);
//! let key = spec.key(5, 62, 123);
//! assert_eq!(key.len(), 62);
//! let m = tern_dispatch::matcher::Machine::compile(&set, 1).unwrap();
//! let mut payload = Vec::new();
//! tern_wire::tlv::Writer::new(&mut payload).put_bytes(1, &key);
//! assert_eq!(m.decide(1, &payload).rule, Some(5));
//! ```

use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::rules::pattern::PatOp;
use crate::rules::{App, CondKind, Condition, DEFAULT_DELIMITER, Rule, RuleSet};

/// The request message the synthetic rules read.
pub const IDL: &str = include_str!("../../../examples/dispatch/kv.proto");

/// Byte written in the skipped positions of a request.
const FILLER: u8 = b'-';

/// One point of the sweep.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Spec {
    /// Skip-and-checks per rule.
    pub checks: u32,
    /// Rules.
    pub rules: u32,
    /// Bytes per check.
    pub bytes: u32,
    /// Seed of the random check bytes.
    pub seed: u64,
}

impl Default for Spec {
    /// The paper's default point: 4 checks, 32 rules, 5 bytes.
    fn default() -> Spec {
        Spec { checks: 4, rules: 32, bytes: 5, seed: 0x7e57 }
    }
}

impl Spec {
    /// Whether the point can be built: at least one check of one byte, and enough check bytes to
    /// tell the rules apart (250 values per byte).
    pub fn validate(&self) -> Result<(), String> {
        if self.checks == 0 || self.bytes == 0 || self.rules == 0 {
            return Err(format!(
                "checks ({}), rules ({}) and bytes ({}) must be at least 1",
                self.checks, self.rules, self.bytes
            ));
        }
        let total = self.checks.saturating_mul(self.bytes);
        let distinct = 250f64.powf(f64::from(total.min(8)));
        if distinct < f64::from(self.rules) {
            return Err(format!(
                "{} rules cannot be told apart with {} checks of {} bytes ({distinct} possible)",
                self.rules, self.checks, self.bytes
            ));
        }
        if self.checks > 255 || self.bytes > 255 {
            return Err("checks and bytes are at most 255".into());
        }
        Ok(())
    }

    /// Bytes of a key's routing part: a filler byte and the check bytes, per check.
    pub fn route_len(&self) -> usize {
        (self.checks * (self.bytes + 1)) as usize
    }

    /// The check bytes of rule `r`, all `checks × bytes` of them.
    pub fn check_bytes(&self, r: u32) -> Vec<u8> {
        let n = (self.checks * self.bytes) as usize;
        let mut rng = SmallRng::seed_from_u64(self.seed ^ (u64::from(r) << 20));
        let mut b: Vec<u8> = (0..n).map(|_| avoid_delimiter(rng.random_range(0..250u32))).collect();
        // Make rules distinct from their first byte: rule number in base 250.
        let (mut v, mut i) = (r, 0);
        while i < n {
            b[i] = avoid_delimiter(v % 250);
            v /= 250;
            i += 1;
            if v == 0 {
                break;
            }
        }
        b
    }

    /// The rule set: `rules` rules on app `kv` (id 1), queue `r % queues`, default queue 0.
    pub fn rule_set(&self, queues: u16) -> RuleSet {
        let schema = tern_idl::parse_str("kv.proto", IDL).expect("built-in IDL");
        let get = schema.message("Get").expect("Get").clone();
        let rules = (0..self.rules)
            .map(|r| {
                let bytes = self.check_bytes(r);
                let mut ops = Vec::new();
                for chunk in bytes.chunks(self.bytes.max(1) as usize) {
                    ops.push(PatOp::Skip(1));
                    ops.push(PatOp::Check(chunk.to_vec()));
                }
                Rule {
                    index: r as usize,
                    name: format!("r{r}"),
                    app_id: 1,
                    req_type: 1,
                    queue: (r % u32::from(queues.max(1))) as u16,
                    conditions: vec![Condition { field: 1, field_name: "key".into(), kind: CondKind::Pattern(ops) }],
                }
            })
            .collect();
        let app = App { name: "kv".into(), id: 1, default_queue: 0, requests: vec![(get, 1)] };
        RuleSet { delimiter: DEFAULT_DELIMITER, apps: vec![app], rules, warnings: Vec::new(), queues: Some(queues) }
    }

    /// A key that rule `r` matches: its routing part, then `id` in decimal, padded with `0` to
    /// `len` bytes (longer than `len` if the routing part needs it).
    pub fn key(&self, r: u32, len: usize, id: u64) -> Vec<u8> {
        let mut key = Vec::with_capacity(len.max(self.route_len() + 20));
        for chunk in self.check_bytes(r).chunks(self.bytes.max(1) as usize) {
            key.push(FILLER);
            key.extend_from_slice(chunk);
        }
        let id = id.to_string();
        let pad = len.saturating_sub(key.len() + id.len());
        key.extend(std::iter::repeat_n(b'0', pad));
        key.extend_from_slice(id.as_bytes());
        key
    }

    /// The rule set as a rule file (TOML), for `tern dispatch check` and `serve`.
    pub fn to_toml(&self, queues: u16, idl: &str) -> String {
        self.rules_toml(&self.rule_set(queues), idl)
    }

    /// The rule file of `set`, one of this spec's rule sets (queues possibly reassigned).
    pub fn rules_toml(&self, set: &RuleSet, idl: &str) -> String {
        let mut s = format!(
            "# {} rules × {} skip-and-checks × {} bytes (tern::synth)\nidl = \"{idl}\"\n\n[[app]]\nname = \"kv\"\nid = 1\n\
             default_queue = 0\nrequests = {{ Get = 1 }}\n",
            self.rules, self.checks, self.bytes
        );
        for r in &set.rules {
            let CondKind::Pattern(ops) = &r.conditions[0].kind else { continue };
            let p = crate::rules::pattern::DisplayPattern(ops).to_string();
            s.push_str(&format!(
                "\n[[rule]]\nname = \"{}\"\napp = \"kv\"\nrequest = \"Get\"\nqueue = {}\nmatch = {{ key = '{}' }}\n",
                r.name, r.queue, p
            ));
        }
        s
    }
}

fn avoid_delimiter(v: u32) -> u8 {
    // 250 values onto bytes, skipping the delimiter, the escape and TOML's quote characters.
    let mut b = v as u8;
    for skip in [b'"', DEFAULT_DELIMITER, b'\'', b'*', b'.', b'\\'] {
        if b >= skip {
            b = b.wrapping_add(1);
        }
    }
    b
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matcher::Machine;
    use crate::matcher::reference::NaiveMatcher;

    #[test]
    fn every_rule_is_hit_by_its_keys_through_all_checks() {
        for spec in [
            Spec::default(),
            Spec { checks: 2, rules: 300, bytes: 1, seed: 1 },
            Spec { checks: 48, rules: 4, bytes: 5, seed: 2 },
            Spec { checks: 2, rules: 8, bytes: 32, seed: 3 },
        ] {
            let set = spec.rule_set(8);
            let m = Machine::compile(&set, 1).unwrap();
            let naive = NaiveMatcher::new(&set);
            for r in 0..spec.rules {
                let mut scratch = Vec::new();
                let mut payload = Vec::new();
                tern_wire::tlv::Writer::new(&mut payload).put_bytes(1, &spec.key(r, 62, u64::from(r) * 7));
                let d = m.decide(1, &payload);
                assert_eq!(d.rule, Some(r), "{spec:?}");
                assert_eq!(naive.decide(1, 1, &payload, &mut scratch).unwrap(), d);
            }
        }
    }

    #[test]
    fn points_that_cannot_tell_rules_apart_are_refused() {
        assert!(Spec::default().validate().is_ok());
        assert!(Spec { checks: 1, rules: 300, bytes: 1, seed: 0 }.validate().is_err());
        assert!(Spec { checks: 2, rules: 300, bytes: 1, seed: 0 }.validate().is_ok());
        assert!(Spec { checks: 0, ..Spec::default() }.validate().is_err());
    }

    #[test]
    fn the_rule_file_round_trips() {
        let spec = Spec { checks: 3, rules: 20, bytes: 4, seed: 9 };
        let text = spec.to_toml(4, "kv.proto");
        let cfg: crate::rules::DispatchConfig = toml::from_str(&text).unwrap();
        let schema = tern_idl::parse_str("kv.proto", IDL).unwrap();
        let set = RuleSet::from_config(&cfg, &schema).unwrap();
        assert_eq!(set.rules, spec.rule_set(4).rules);
    }
}
