//! The placement pass (docs/clip.md, "Placement"): a program's tables and register arrays put
//! into a pipe's stages by their dependencies and the stages' resources, saying where each
//! landed and what each stage uses — what a P4 compiler's table placement does, on the
//! resource model of `tern_hw::switch`.
//!
//! Items are placed in program order. An item must come after every earlier item it depends
//! on: a *match* dependency (its key or index reads a field the earlier one writes) or an
//! *action* dependency (it writes a field the earlier one reads or writes). Otherwise it may
//! share a stage. Each goes to the first stage, at or after its dependencies allow, with room
//! for it. A table whose SRAM or TCAM blocks exceed what one stage has left spans consecutive
//! stages (its crossbar bytes, hash bits and actions' VLIW slots counted in each stage it
//! spans); a register array must fit one stage (its stateful ALU is in one stage).

use tern_hw::switch::{SwitchModel, Use};

/// How a key field is matched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MatchKind {
    Exact,
    Lpm,
    Ternary,
}

/// A match-action table to place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TableSpec {
    pub name: String,
    /// Key fields: name, bits, how matched (any non-exact key makes it a TCAM table).
    pub keys: Vec<(String, u64, MatchKind)>,
    pub entries: u64,
    /// Bits of action data an entry holds.
    pub action_bits: u64,
    /// Fields its actions read and write.
    pub reads: Vec<String>,
    pub writes: Vec<String>,
    /// Primitives of its actions (VLIW slots).
    pub primitives: u64,
    /// Register arrays its actions use: one placed earlier pins the table to that array's
    /// stage (its stateful ALU is there).
    pub registers: Vec<String>,
}

/// A register array to place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisterSpec {
    pub name: String,
    pub entries: u64,
    pub bits: u64,
    /// Fields its index and its ALU read, and fields its ALU writes.
    pub reads: Vec<String>,
    pub writes: Vec<String>,
    /// The table whose actions drive it (placed earlier): its stateful ALU runs in that
    /// table's stage, so it goes in the table's first stage. None: placed by its own
    /// dependencies.
    pub owner: Option<String>,
}

/// A table or a register array.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    Table(TableSpec),
    Register(RegisterSpec),
}

impl Item {
    /// Its name.
    pub fn name(&self) -> &str {
        match self {
            Item::Table(t) => &t.name,
            Item::Register(r) => &r.name,
        }
    }

    fn reads(&self) -> Vec<&str> {
        match self {
            Item::Table(t) => t.keys.iter().map(|k| k.0.as_str()).chain(t.reads.iter().map(String::as_str)).collect(),
            Item::Register(r) => r.reads.iter().map(String::as_str).collect(),
        }
    }

    fn writes(&self) -> &[String] {
        match self {
            Item::Table(t) => &t.writes,
            Item::Register(r) => &r.writes,
        }
    }

    /// Whether it must come after `earlier`: it reads what `earlier` writes, or writes what
    /// `earlier` reads or writes.
    fn depends_on(&self, earlier: &Item) -> bool {
        let ew = earlier.writes();
        let er = earlier.reads();
        self.reads().iter().any(|f| ew.iter().any(|w| w == f))
            || self.writes().iter().any(|w| ew.contains(w) || er.contains(&w.as_str()))
    }
}

/// Where an item landed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Landed {
    pub name: String,
    /// Its first and last stage (equal unless it spans stages).
    pub first: usize,
    pub last: usize,
    /// What it uses in all.
    pub uses: Use,
}

/// A placed program.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Placement {
    pub items: Vec<Landed>,
    /// What each stage uses.
    pub stages: Vec<Use>,
}

impl Placement {
    /// What the whole program uses.
    pub fn total(&self) -> Use {
        self.stages.iter().fold(Use::default(), |a, &b| a + b)
    }

    /// Stages used (the last stage anything landed in, plus one).
    pub fn depth(&self) -> usize {
        self.items.iter().map(|l| l.last + 1).max().unwrap_or(0)
    }
}

/// Why a program does not place.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlaceError {
    /// Two items share a name.
    #[error("`{0}` is named twice")]
    Duplicate(String),
    /// An item does not fit the stages left after its dependencies.
    #[error("{what} `{name}` does not fit: it needs {need} from stage {from} on, where the pipe has {left} left")]
    DoesNotFit { what: &'static str, name: String, need: String, from: usize, left: String },
}

fn fits(used: &Use, add: &Use, cap: &Use) -> bool {
    used.sram_blocks + add.sram_blocks <= cap.sram_blocks
        && used.tcam_blocks + add.tcam_blocks <= cap.tcam_blocks
        && used.crossbar_bytes + add.crossbar_bytes <= cap.crossbar_bytes
        && used.hash_bits + add.hash_bits <= cap.hash_bits
        && used.vliw_slots + add.vliw_slots <= cap.vliw_slots
}

/// Places `items` (in program order) into `model`'s stages.
pub fn place(model: &SwitchModel, items: &[Item]) -> Result<Placement, PlaceError> {
    for (i, it) in items.iter().enumerate() {
        if items[..i].iter().any(|o| o.name() == it.name()) {
            return Err(PlaceError::Duplicate(it.name().to_string()));
        }
    }
    let stages = model.stages as usize;
    let cap = Use {
        sram_blocks: model.sram_blocks,
        tcam_blocks: model.tcam_blocks,
        crossbar_bytes: model.crossbar_bytes,
        hash_bits: model.hash_bits,
        vliw_slots: model.vliw_slots,
    };
    let mut used = vec![Use::default(); stages];
    let mut landed: Vec<Landed> = Vec::with_capacity(items.len());
    for (i, it) in items.iter().enumerate() {
        let from = items[..i]
            .iter()
            .zip(&landed)
            .filter(|(o, _)| it.depends_on(o))
            .map(|(_, l)| l.last + 1)
            .max()
            .unwrap_or(0);
        let l = match it {
            Item::Register(r) => {
                let u = model.registers(1, r.entries, r.bits);
                // Driven by a table's actions: that table's first stage, and only there.
                let owner = r.owner.as_ref().and_then(|o| landed.iter().find(|l| l.name == *o)).map(|l| l.first);
                let range = match owner {
                    Some(s) => s..s + 1,
                    None => from..stages,
                };
                let from = range.start;
                let s = range.clone().find(|&s| fits(&used[s], &u, &cap)).ok_or_else(|| PlaceError::DoesNotFit {
                    what: "register",
                    name: r.name.clone(),
                    need: format!("{} SRAM blocks and {} hash bits in one stage", u.sram_blocks, u.hash_bits),
                    from,
                    left: left_in(&used, &cap, from),
                })?;
                used[s] = used[s] + u;
                Landed { name: r.name.clone(), first: s, last: s, uses: u }
            }
            Item::Table(t) => {
                // A register an earlier item placed: the table runs in that stage or not at all.
                let pinned = t.registers.iter().find_map(|r| {
                    items[..i]
                        .iter()
                        .zip(&landed)
                        .find(|(o, _)| matches!(o, Item::Register(x) if x.name == *r))
                        .map(|(_, l)| (r, l.first))
                });
                match pinned {
                    Some((r, s)) if s < from => {
                        return Err(PlaceError::DoesNotFit {
                            what: "table",
                            name: t.name.clone(),
                            need: format!(
                                "stage {s} (register `{r}` is there), but its dependencies end at stage {from}"
                            ),
                            from,
                            left: left_in(&used, &cap, from),
                        });
                    }
                    Some((r, s)) => {
                        let l = place_table(model, t, s, &mut used, &cap)?;
                        if l.first != s {
                            return Err(PlaceError::DoesNotFit {
                                what: "table",
                                name: t.name.clone(),
                                need: format!("room in stage {s}, where register `{r}` is"),
                                from: s,
                                left: left_in(&used, &cap, s),
                            });
                        }
                        l
                    }
                    None => place_table(model, t, from, &mut used, &cap)?,
                }
            }
        };
        landed.push(l);
    }
    Ok(Placement { items: landed, stages: used })
}

/// The most a stage has left of each resource from `from` on, as text.
fn left_in(used: &[Use], cap: &Use, from: usize) -> String {
    let rest: Vec<&Use> = used.iter().skip(from).collect();
    if rest.is_empty() {
        return "no stage".to_string();
    }
    let n = rest.len();
    let sram: u64 = rest.iter().map(|u| cap.sram_blocks - u.sram_blocks).sum();
    let tcam: u64 = rest.iter().map(|u| cap.tcam_blocks - u.tcam_blocks).sum();
    format!("{sram} SRAM and {tcam} TCAM blocks in {n} stage{}", if n == 1 { "" } else { "s" })
}

fn place_table(
    model: &SwitchModel,
    t: &TableSpec,
    from: usize,
    used: &mut [Use],
    cap: &Use,
) -> Result<Landed, PlaceError> {
    let key_bits: u64 = t.keys.iter().map(|k| k.1).sum();
    let ternary = t.keys.iter().any(|k| k.2 != MatchKind::Exact);
    let whole = if ternary {
        model.ternary(t.entries, key_bits, t.action_bits)
    } else {
        model.exact(t.entries, key_bits, t.action_bits)
    };
    // In every stage it spans: its crossbar bytes, hash bits and actions.
    let per_stage = Use {
        crossbar_bytes: if ternary { 0 } else { whole.crossbar_bytes },
        hash_bits: whole.hash_bits,
        vliw_slots: t.primitives,
        ..Use::default()
    };
    // What was left before this table took any (it may fail part of the way across stages).
    let left = left_in(used, cap, from);
    let err =
        |need: String| PlaceError::DoesNotFit { what: "table", name: t.name.clone(), need, from, left: left.clone() };
    let need = format!("{} SRAM and {} TCAM blocks", whole.sram_blocks, whole.tcam_blocks);
    // The first stage from `from` whose fixed needs fit and that has a block of what it takes.
    let takes_block = |u: &Use| {
        (whole.sram_blocks == 0 || u.sram_blocks < cap.sram_blocks)
            && (whole.tcam_blocks == 0 || u.tcam_blocks < cap.tcam_blocks)
    };
    let first = (from..used.len())
        .find(|&s| fits(&used[s], &per_stage, cap) && takes_block(&used[s]))
        .ok_or_else(|| err(need.clone()))?;
    let (mut sram, mut tcam) = (whole.sram_blocks, whole.tcam_blocks);
    let mut s = first;
    let mut total = Use::default();
    loop {
        if s >= used.len() || !fits(&used[s], &per_stage, cap) {
            return Err(err(need));
        }
        let take_sram = sram.min(cap.sram_blocks - used[s].sram_blocks);
        let take_tcam = tcam.min(cap.tcam_blocks - used[s].tcam_blocks);
        let add = Use { sram_blocks: take_sram, tcam_blocks: take_tcam, ..per_stage };
        used[s] = used[s] + add;
        total = total + add;
        sram -= take_sram;
        tcam -= take_tcam;
        if sram == 0 && tcam == 0 {
            break;
        }
        s += 1;
    }
    Ok(Landed { name: t.name.clone(), first, last: s, uses: total })
}
