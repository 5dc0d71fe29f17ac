//! Automatic field updating (RpcNIC §III-F): a schema table whose placements change at run time.
//!
//! When a handler moves a field between host and device memory (`MessageMut::move_to_nic`,
//! `move_to_cpu`, Table III), the schema table's entry for that field follows: `move_to_nic` adds
//! the "Acc" label, `move_to_cpu` removes it, so the next message of that class is deserialized
//! where the field was last wanted and needs no move. A [`LiveSchema`] holds the current table
//! behind a lock, with a generation number that each change of placement increments; a decode
//! takes one snapshot ([`LiveSchema::snapshot`]) and reads the whole message with it, so a table
//! never changes under a message being read. Updating can be turned off
//! ([`LiveSchema::set_auto_update`]): moves then leave the table as it is.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};

use crate::schema::{ClassId, Placement, SchemaTable};

/// A schema table whose placements moves update.
#[derive(Debug)]
pub struct LiveSchema {
    current: RwLock<(Arc<SchemaTable>, u64)>,
    auto_update: AtomicBool,
    updates: AtomicU64,
}

impl LiveSchema {
    /// `table` at generation 0, updating on (`auto_update`) or off.
    pub fn new(table: SchemaTable, auto_update: bool) -> LiveSchema {
        LiveSchema {
            current: RwLock::new((Arc::new(table), 0)),
            auto_update: AtomicBool::new(auto_update),
            updates: AtomicU64::new(0),
        }
    }

    /// The table now and its generation: what one message is read with.
    pub fn snapshot(&self) -> (Arc<SchemaTable>, u64) {
        let g = self.current.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        (g.0.clone(), g.1)
    }

    /// The generation now (0, then one more for each change of placement).
    pub fn generation(&self) -> u64 {
        self.snapshot().1
    }

    /// Whether moves update the table.
    pub fn auto_update(&self) -> bool {
        self.auto_update.load(Ordering::Relaxed)
    }

    /// Turns updating on or off.
    pub fn set_auto_update(&self, on: bool) {
        self.auto_update.store(on, Ordering::Relaxed);
    }

    /// Changes of placement made so far.
    pub fn updates(&self) -> u64 {
        self.updates.load(Ordering::Relaxed)
    }

    /// A field of `class` (by index) was moved to `to`: with updating on, its entry is placed
    /// there (a new table at the next generation) unless it already is. Whether it changed.
    pub fn moved(&self, class: ClassId, fi: usize, to: Placement) -> bool {
        if !self.auto_update() {
            return false;
        }
        let mut g = self.current.write().unwrap_or_else(std::sync::PoisonError::into_inner);
        let placed = g.0.classes.get(class as usize).and_then(|c| c.fields.get(fi)).map(|f| f.placement);
        if placed.is_none_or(|p| p == to) {
            return false;
        }
        let Some(t) = g.0.with_placement(class, fi, to) else { return false };
        let generation = g.1 + 1;
        *g = (Arc::new(t), generation);
        self.updates.fetch_add(1, Ordering::Relaxed);
        true
    }
}
