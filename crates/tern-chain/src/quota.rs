//! What each client holds of a bounded table (a NAT's ports, a firewall's flows, a transport's
//! connections), so that no one client fills it: a client holding its limit gets no more entries
//! until one of its own is forgotten. Keyed by what tells the clients apart (an address); a
//! client holding nothing takes no room, so the counts are bounded by the table's entries.

use std::collections::HashMap;
use std::hash::Hash;

/// The entries each client holds.
#[derive(Debug, Clone)]
pub(crate) struct Quota<K> {
    held: HashMap<K, u32>,
}

impl<K> Default for Quota<K> {
    fn default() -> Self {
        Quota { held: HashMap::new() }
    }
}

impl<K: Hash + Eq + Copy> Quota<K> {
    /// Whether `client` holds `limit` entries or more.
    pub(crate) fn at_limit(&self, client: K, limit: usize) -> bool {
        self.held(client) as usize >= limit
    }

    /// Counts one more entry for `client`.
    pub(crate) fn take(&mut self, client: K) {
        *self.held.entry(client).or_insert(0) += 1;
    }

    /// Counts one entry of `client`'s gone (a client down to none is forgotten).
    pub(crate) fn give_back(&mut self, client: K) {
        if let std::collections::hash_map::Entry::Occupied(mut e) = self.held.entry(client) {
            *e.get_mut() -= 1;
            if *e.get() == 0 {
                e.remove();
            }
        }
    }

    /// The entries `client` holds.
    pub(crate) fn held(&self, client: K) -> u32 {
        self.held.get(&client).copied().unwrap_or(0)
    }

    /// Clients holding at least one entry.
    #[cfg(test)]
    pub(crate) fn clients(&self) -> usize {
        self.held.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_each_client_and_forgets_those_down_to_none() {
        let mut q = Quota::default();
        for _ in 0..3 {
            q.take(1u32);
        }
        q.take(2);
        assert!(q.at_limit(1, 3) && !q.at_limit(1, 4) && !q.at_limit(2, 2) && q.at_limit(2, 1));
        q.give_back(1);
        assert_eq!((q.held(1), q.held(2), q.clients()), (2, 1, 2));
        q.give_back(2);
        // One that holds nothing takes no room, and giving back what is not held changes nothing.
        q.give_back(2);
        q.give_back(9);
        assert_eq!((q.held(2), q.clients()), (0, 1));
    }
}
