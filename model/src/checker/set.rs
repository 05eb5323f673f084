//! The set of fingerprints generated: open addressing with linear probing over plain words,
//! zero for an empty slot. A lookup touches one cache line where hashbrown's touches two
//! (its control bytes and its slot), and the set's inserts are where a large check spends its
//! time: in a table of millions of fingerprints nearly every one misses the cache.

/// At most this share of the slots is used before the table doubles: seven eighths.
const LOAD_NUMERATOR: usize = 7;
const LOAD_DENOMINATOR: usize = 8;

#[derive(Default)]
pub(super) struct FingerprintSet {
    slots: Vec<u64>,
    len: usize,
}

impl FingerprintSet {
    /// Adds `fingerprint`; true if it was not there. Zero stands for one (zero marks an
    /// empty slot): a collision no likelier than any other pair's.
    pub fn insert(&mut self, fingerprint: u64) -> bool {
        let fingerprint = fingerprint.max(1);
        if (self.len + 1) * LOAD_DENOMINATOR > self.slots.len() * LOAD_NUMERATOR {
            self.grow();
        }
        let mask = self.slots.len() - 1;
        let mut slot = Self::first_slot(fingerprint, mask);
        loop {
            match self.slots[slot] {
                0 => {
                    self.slots[slot] = fingerprint;
                    self.len += 1;
                    return true;
                }
                known if known == fingerprint => return false,
                _ => slot = (slot + 1) & mask,
            }
        }
    }

    /// The slot where `fingerprint`'s probe starts in a table of mask `mask`: the low bits
    /// (the caller picks a shard by the high ones). Zero stands for one, as in `insert`.
    pub fn first_slot(fingerprint: u64, mask: usize) -> usize {
        fingerprint.max(1) as usize & mask
    }

    /// The table, for a prefetch.
    pub fn table(&self) -> *const u64 {
        self.slots.as_ptr()
    }

    /// The mask that picks a fingerprint's first slot (zero before the first insert).
    pub fn mask(&self) -> usize {
        self.slots.len().saturating_sub(1)
    }

    fn grow(&mut self) {
        let size = (self.slots.len() * 2).max(1024);
        let old = std::mem::replace(&mut self.slots, vec![0; size]);
        self.len = 0;
        for fingerprint in old.into_iter().filter(|&f| f != 0) {
            self.insert(fingerprint);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::FingerprintSet;

    #[test]
    fn an_insert_is_new_once_across_growth() {
        let mut set = FingerprintSet::default();
        // Values that share their low bits probe past each other.
        let values: Vec<u64> = (0..10_000u64).map(|i| i << 20 | 7).chain([0, 1]).collect();
        for &value in &values {
            assert!(set.insert(value) || value == 1, "{value} was new");
        }
        for &value in &values {
            assert!(!set.insert(value), "{value} was known");
        }
        assert_eq!(set.len, 10_001, "zero and one are one fingerprint");
    }

    /// A prefetch names the slot where an insert's probe starts.
    #[test]
    fn the_first_slot_is_where_a_lone_fingerprint_lands() {
        for fingerprint in [0, 1, 5, u64::MAX, 0xdead_beef_0000_0400] {
            let mut set = FingerprintSet::default();
            set.insert(fingerprint);
            let slot = FingerprintSet::first_slot(fingerprint, set.mask());
            assert_eq!(set.slots[slot], fingerprint.max(1));
            assert_eq!(
                set.table().wrapping_add(slot),
                &set.slots[slot] as *const u64
            );
        }
    }
}
