//! Heavy-hitter offload (CLIP §III-D, "Relieving burden of servers by automatic flow
//! replacement"), sans I/O: a program's table is mirrored on the servers, where every entry lives
//! by default; the switch's own copy (the *original* table) holds the few entries its memory
//! allows, and serves their flows without a server. Each interval the controller moves the
//! heaviest flows' entries into the original table, found by a count-min sketch in the switch's
//! registers.
//!
//! Per packet ([`Offload::packet`]): a hit in the original table counts on the entry's own hit
//! counter and is served by the switch; a miss goes to a server and is counted in the sketch,
//! and a packet whose flow's estimate is at or above the digest threshold sends the flow to the
//! controller as a candidate (a digest; the controller keeps each flow once an interval — an
//! estimate can pass the threshold between two of the flow's packets, on other flows' counts,
//! so every packet above it digests, as a switch's digest engine would without a filter).
//!
//! Per interval ([`Offload::interval`]): the controller ranks the original table's entries by
//! their hit counters and the candidates by their estimates (both are packets this interval),
//! keeps the `capacity` largest, evicts the entries that fell out and installs the candidates
//! that came in (make-before-break: an entry is installed in the original before the mirror
//! stops answering for it, and removed from the original before its flow's packets go back to
//! the mirror — in a single-threaded model both orders are one step), then clears the sketch
//! and the hit counters. [`Mode::Random`] is the paper's "w/ R": it installs flows drawn at
//! random from the interval's misses instead.

use hashbrown::{HashMap, HashSet};
use tern_table::sketch::CountMin;

use crate::group::FlowId;

/// How the controller picks the flows to offload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The count-min sketch's heavy hitters ("w/ S").
    Sketch,
    /// Flows drawn at random from the interval's misses ("w/ R").
    Random,
}

/// The offload's shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffloadConfig {
    /// Entries the original (switch) table holds.
    pub capacity: usize,
    /// The sketch: ways × counters a way (CLIP's: 2 × 1024).
    pub sketch_ways: usize,
    pub sketch_width: usize,
    /// The estimate at which a flow is digested to the controller.
    pub threshold: u32,
    pub mode: Mode,
    /// Seed of the random draws (`Mode::Random`).
    pub seed: u64,
}

/// Entries of the original table and the reservoir made before any is needed.
const PREALLOCATED: usize = 1 << 12;

impl Default for OffloadConfig {
    fn default() -> OffloadConfig {
        OffloadConfig { capacity: 2048, sketch_ways: 2, sketch_width: 1024, threshold: 8, mode: Mode::Sketch, seed: 1 }
    }
}

/// Where a packet was served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Served {
    /// By the switch's original table.
    Switch,
    /// By a server (the mirrored table, or the remote handler).
    Server,
}

/// What an interval's controller step did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct IntervalReport {
    /// Packets of the interval served by the switch and by servers.
    pub switch_packets: u64,
    pub server_packets: u64,
    /// Candidates digested this interval.
    pub digests: usize,
    /// Entries installed into and evicted from the original table.
    pub installed: usize,
    pub evicted: usize,
    /// Which: the flows whose entries go into and out of the original table.
    pub installed_flows: Vec<FlowId>,
    pub evicted_flows: Vec<FlowId>,
}

/// The switch's original table, its sketch and the controller's choice.
#[derive(Debug, Clone)]
pub struct Offload {
    cfg: OffloadConfig,
    /// The original table: each entry's hits this interval.
    original: HashMap<FlowId, u64>,
    sketch: CountMin,
    digests: Vec<FlowId>,
    digested: HashSet<FlowId>,
    /// Each ranked flow's score at the last interval (its packets then, as counted or
    /// estimated): this interval's are averaged with it, so one interval's noise moves less.
    history: HashMap<FlowId, f64>,
    /// Random mode: a reservoir sample of the interval's flows (packets drawn uniformly, so a
    /// flow is drawn as often as it sends), and how many packets were seen.
    reservoir: Vec<FlowId>,
    in_reservoir: HashSet<FlowId>,
    seen: u64,
    rng: u64,
    switch_packets: u64,
    server_packets: u64,
}

impl Offload {
    /// An empty original table (every entry in the mirror) and a zeroed sketch.
    pub fn new(cfg: OffloadConfig) -> Result<Offload, tern_table::TableError> {
        Ok(Offload {
            sketch: CountMin::new(cfg.sketch_ways, cfg.sketch_width)?,
            // Room made as entries come, past the first few thousand: `capacity` is a bound.
            original: HashMap::with_capacity(cfg.capacity.min(PREALLOCATED)),
            digests: Vec::new(),
            digested: HashSet::new(),
            history: HashMap::new(),
            reservoir: Vec::with_capacity(cfg.capacity.min(PREALLOCATED)),
            in_reservoir: HashSet::new(),
            seen: 0,
            rng: cfg.seed | 1,
            switch_packets: 0,
            server_packets: 0,
            cfg,
        })
    }

    fn next_random(&mut self) -> u64 {
        // xorshift64*
        let mut x = self.rng;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A packet of `flow` (the data plane).
    pub fn packet(&mut self, flow: FlowId) -> Served {
        self.packet_digest(flow).0
    }

    /// A packet of `flow`, and whether it made the flow a candidate this interval (its first
    /// digest; random mode: its first draw into the sample).
    pub fn packet_digest(&mut self, flow: FlowId) -> (Served, bool) {
        let drawn = self.cfg.mode == Mode::Random && self.sample(flow);
        if let Some(hits) = self.original.get_mut(&flow) {
            *hits += 1;
            self.switch_packets += 1;
            return (Served::Switch, false);
        }
        self.server_packets += 1;
        match self.cfg.mode {
            Mode::Sketch => {
                let d = self.cfg.capacity > 0
                    && self.sketch.add(flow, 1) >= self.cfg.threshold
                    && self.digested.insert(flow);
                if d {
                    self.digests.push(flow);
                }
                (Served::Server, d)
            }
            Mode::Random => (Served::Server, drawn),
        }
    }

    /// Takes `flow`'s entry out of the original table (its install failed, or an operator
    /// removed it); whether it was there.
    pub fn forget(&mut self, flow: FlowId) -> bool {
        self.history.remove(&flow);
        self.original.remove(&flow).is_some()
    }

    /// Puts `flow`'s entry in the original table outside the interval's choice (an operator's
    /// or a benchmark's); false if the table is full.
    pub fn adopt(&mut self, flow: FlowId) -> bool {
        if self.original.contains_key(&flow) {
            return true;
        }
        if self.original.len() >= self.cfg.capacity {
            return false;
        }
        self.original.insert(flow, 0);
        true
    }

    /// Whether the interval's choice runs (sketch or random); false when the original table
    /// has no room.
    pub fn enabled(&self) -> bool {
        self.cfg.capacity > 0
    }

    /// Random mode: reservoir sampling over the interval's packets (a flow kept once); whether
    /// the flow went into the sample.
    fn sample(&mut self, flow: FlowId) -> bool {
        self.seen += 1;
        if self.cfg.capacity == 0 || self.in_reservoir.contains(&flow) {
            return false;
        }
        if self.reservoir.len() < self.cfg.capacity {
            self.reservoir.push(flow);
            self.in_reservoir.insert(flow);
            true
        } else {
            let j = (self.next_random() % self.seen) as usize;
            if j < self.reservoir.len() {
                let out = std::mem::replace(&mut self.reservoir[j], flow);
                self.in_reservoir.remove(&out);
                self.in_reservoir.insert(flow);
                true
            } else {
                false
            }
        }
    }

    /// The controller's step at an interval's end.
    pub fn interval(&mut self) -> IntervalReport {
        let mut report = IntervalReport {
            switch_packets: self.switch_packets,
            server_packets: self.server_packets,
            digests: self.digests.len(),
            ..IntervalReport::default()
        };
        // Ranked by packets this interval — the original's entries by their hit counters, the
        // candidates by their count-mean-min estimates — averaged with the last interval's
        // score where the flow had one. At random: the sampled flows replace the table.
        let mut ranked: Vec<(f64, FlowId)> = match self.cfg.mode {
            Mode::Sketch => {
                let mut r: Vec<(f64, FlowId)> = self.original.iter().map(|(&f, &h)| (h as f64, f)).collect();
                for &f in &self.digests {
                    if !self.original.contains_key(&f) {
                        r.push((self.sketch.estimate_debiased(f), f));
                    }
                }
                for (score, f) in &mut r {
                    if let Some(last) = self.history.get(f) {
                        *score = (*score + last) / 2.0;
                    }
                }
                self.history = r.iter().map(|&(s, f)| (f, s)).collect();
                // Largest first; ties by flow id, so the choice does not depend on hash order.
                r.sort_unstable_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
                r
            }
            Mode::Random => self.reservoir.iter().map(|&f| (1.0, f)).collect(),
        };
        ranked.truncate(self.cfg.capacity);
        let keep: HashSet<FlowId> = ranked.iter().map(|r| r.1).collect();
        let mut evicted = Vec::new();
        self.original.retain(|f, _| {
            let k = keep.contains(f);
            if !k {
                evicted.push(*f);
            }
            k
        });
        report.evicted = evicted.len();
        report.evicted_flows = evicted;
        for &(_, f) in &ranked {
            if let hashbrown::hash_map::Entry::Vacant(v) = self.original.entry(f) {
                v.insert(0);
                report.installed += 1;
                report.installed_flows.push(f);
            }
        }
        for h in self.original.values_mut() {
            *h = 0;
        }
        self.sketch.clear();
        self.digests.clear();
        self.digested.clear();
        self.reservoir.clear();
        self.in_reservoir.clear();
        self.seen = 0;
        self.switch_packets = 0;
        self.server_packets = 0;
        report
    }

    /// `flow`'s entry's hits this interval (None: not in the original table).
    pub fn hits(&self, flow: FlowId) -> Option<u64> {
        self.original.get(&flow).copied()
    }

    /// Whether `flow`'s entry is in the original table.
    pub fn offloaded(&self, flow: FlowId) -> bool {
        self.original.contains_key(&flow)
    }

    /// Entries in the original table.
    pub fn entries(&self) -> usize {
        self.original.len()
    }

    /// The flows whose entries are in the original table.
    pub fn original_flows(&self) -> impl Iterator<Item = FlowId> + '_ {
        self.original.keys().copied()
    }

    /// The sketch (its shape and cost).
    pub fn sketch(&self) -> &CountMin {
        &self.sketch
    }
}
