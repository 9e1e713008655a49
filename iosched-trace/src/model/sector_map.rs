//! The simulator's merge lookups: the requests waiting in the scheduler by their start
//! and by their end sector. Each request is entered twice and removed twice, and each bio
//! looks once or twice: with a general hash map those were a tenth of a replay. The maps
//! stay as small as the scheduler's queue, so an open-addressing table with linear probing
//! at most half full finds a key in a probe or two.
//!
//! Behaves as a `HashMap<u64, u32>` for `get`, `insert` (a key present takes the new value)
//! and `remove`.
//!
//! Owns: the table. Must not: know what the keys mean.

/// A slot's key when it holds nothing; the entry under this key itself is kept aside.
const EMPTY: u64 = u64::MAX;

#[derive(Clone, Copy)]
struct Slot {
    key: u64,
    value: u32,
}

pub(crate) struct SectorMap {
    /// A power of two of slots.
    slots: Vec<Slot>,
    /// 64 minus log2 of the number of slots: a key's home slot is its hash's top bits.
    shift: u32,
    len: usize,
    /// The value under [`EMPTY`], which cannot sit in a slot.
    at_empty: Option<u32>,
}

impl Default for SectorMap {
    fn default() -> Self {
        SectorMap::with_slots(64)
    }
}

impl SectorMap {
    fn with_slots(slots: usize) -> SectorMap {
        debug_assert!(slots.is_power_of_two());
        SectorMap {
            slots: vec![
                Slot {
                    key: EMPTY,
                    value: 0
                };
                slots
            ],
            shift: 64 - slots.trailing_zeros(),
            len: 0,
            at_empty: None,
        }
    }

    fn mask(&self) -> usize {
        self.slots.len() - 1
    }

    /// Fibonacci hashing: sectors of one stream are multiples of its bio size, and the
    /// multiplication spreads them over the top bits.
    fn home(&self, key: u64) -> usize {
        (key.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> self.shift) as usize
    }

    /// The slot holding `key`, or the empty one where it would go.
    fn find(&self, key: u64) -> (usize, bool) {
        let mask = self.mask();
        let mut i = self.home(key);
        loop {
            match self.slots[i].key {
                k if k == key => return (i, true),
                EMPTY => return (i, false),
                _ => i = (i + 1) & mask,
            }
        }
    }

    pub(crate) fn get(&self, key: u64) -> Option<u32> {
        if key == EMPTY {
            return self.at_empty;
        }
        match self.find(key) {
            (i, true) => Some(self.slots[i].value),
            _ => None,
        }
    }

    /// `value` under `key`, replacing (and returning) the one there.
    pub(crate) fn insert(&mut self, key: u64, value: u32) -> Option<u32> {
        if key == EMPTY {
            return self.at_empty.replace(value);
        }
        if (self.len + 1) * 2 > self.slots.len() {
            self.grow();
        }
        match self.find(key) {
            (i, true) => Some(std::mem::replace(&mut self.slots[i].value, value)),
            (i, false) => {
                self.slots[i] = Slot { key, value };
                self.len += 1;
                None
            }
        }
    }

    pub(crate) fn remove(&mut self, key: u64) -> Option<u32> {
        if key == EMPTY {
            return self.at_empty.take();
        }
        let (mut hole, true) = self.find(key) else {
            return None;
        };
        let value = self.slots[hole].value;
        self.len -= 1;
        // Backward shift: entries after the hole whose probe passed through it move into
        // it, so that a search never stops at a hole before its key.
        let mask = self.mask();
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            let k = self.slots[j].key;
            if k == EMPTY {
                break;
            }
            // How far `j` is from its home, and from the hole, going forwards.
            let from_home = j.wrapping_sub(self.home(k)) & mask;
            let from_hole = j.wrapping_sub(hole) & mask;
            if from_home >= from_hole {
                self.slots[hole] = self.slots[j];
                hole = j;
            }
        }
        self.slots[hole].key = EMPTY;
        Some(value)
    }

    fn grow(&mut self) {
        let old = std::mem::replace(self, SectorMap::with_slots(self.slots.len() * 2));
        self.at_empty = old.at_empty;
        for slot in old.slots.into_iter().filter(|s| s.key != EMPTY) {
            let (i, _) = self.find(slot.key);
            self.slots[i] = slot;
            self.len += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn random_operations_agree_with_a_hash_map() {
        let mut rng = 0x853c_49e6_748f_ea9b_u64;
        let mut next = move || {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            rng
        };
        for round in 0..20 {
            let mut map = SectorMap::default();
            let mut oracle: HashMap<u64, u32> = HashMap::new();
            // Few distinct keys: inserts over present keys and removals that hit; keys
            // close together and multiples of 8, as sectors are; the empty marker too.
            let spread = 8 + round * 40;
            for _ in 0..5_000 {
                let r = next();
                let key = match r % 50 {
                    0 => EMPTY,
                    _ => (r >> 8) % spread * 8,
                };
                let value = (r >> 32) as u32;
                match (r >> 4) % 3 {
                    0 | 1 => assert_eq!(map.insert(key, value), oracle.insert(key, value)),
                    _ => assert_eq!(map.remove(key), oracle.remove(&key)),
                }
                let probe = (next() >> 8) % spread * 8;
                assert_eq!(map.get(probe), oracle.get(&probe).copied());
                assert_eq!(map.get(EMPTY), oracle.get(&EMPTY).copied());
            }
            for (k, v) in &oracle {
                assert_eq!(map.get(*k), Some(*v), "key {k}");
            }
        }
    }

    #[test]
    fn a_removal_keeps_the_keys_that_probed_past_it() {
        let mut map = SectorMap::with_slots(8);
        // Keys sharing a home slot sit in a run; removing the first must leave the
        // others findable.
        let home = map.home(0);
        let same_home: Vec<u64> = (1..100_000u64)
            .filter(|k| map.home(*k) == home)
            .take(3)
            .collect();
        assert_eq!(same_home.len(), 3);
        for (v, k) in same_home.iter().enumerate() {
            map.insert(*k, v as u32);
        }
        assert_eq!(map.remove(same_home[0]), Some(0));
        assert_eq!(map.get(same_home[1]), Some(1));
        assert_eq!(map.get(same_home[2]), Some(2));
        assert_eq!(map.get(same_home[0]), None);
    }
}
