//! A map keyed by device, tuned for what traces look like: a handful of devices, and long
//! runs of events on the same one. A lookup checks the last hit first, then an index.

use std::cell::Cell;

use rustc_hash::FxHashMap;

use crate::event::Dev;

#[derive(Clone, Debug)]
pub struct DevMap<T> {
    entries: Vec<(Dev, T)>,
    index: FxHashMap<Dev, usize>,
    last: Cell<usize>,
}

impl<T> Default for DevMap<T> {
    fn default() -> Self {
        DevMap {
            entries: Vec::new(),
            index: FxHashMap::default(),
            last: Cell::new(0),
        }
    }
}

impl<T> DevMap<T> {
    /// The last hit, inlined into every caller (it is most lookups: a few compares); the
    /// index behind it is not.
    #[inline]
    fn position(&self, dev: &Dev) -> Option<usize> {
        let last = self.last.get();
        if let Some((d, _)) = self.entries.get(last)
            && d == dev
        {
            return Some(last);
        }
        self.indexed_position(dev)
    }

    #[inline(never)]
    fn indexed_position(&self, dev: &Dev) -> Option<usize> {
        let at = *self.index.get(dev)?;
        self.last.set(at);
        Some(at)
    }

    #[inline]
    pub fn get(&self, dev: &Dev) -> Option<&T> {
        self.position(dev).map(|i| &self.entries[i].1)
    }

    #[inline]
    pub fn get_mut(&mut self, dev: &Dev) -> Option<&mut T> {
        self.position(dev).map(|i| &mut self.entries[i].1)
    }

    #[inline]
    pub fn get_or_insert_with(&mut self, dev: Dev, make: impl FnOnce() -> T) -> &mut T {
        let at = match self.position(&dev) {
            Some(at) => at,
            None => self.push_new(dev, make),
        };
        &mut self.entries[at].1
    }

    /// A device's first entry: once per device, kept out of the lookups' inlined path.
    #[cold]
    #[inline(never)]
    fn push_new(&mut self, dev: Dev, make: impl FnOnce() -> T) -> usize {
        self.entries.push((dev, make()));
        let at = self.entries.len() - 1;
        self.index.insert(dev, at);
        self.last.set(at);
        at
    }

    pub fn iter(&self) -> impl Iterator<Item = (&Dev, &T)> {
        self.entries.iter().map(|(d, t)| (d, t))
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&Dev, &mut T)> {
        self.entries.iter_mut().map(|(d, t)| (&*d, t))
    }

    pub fn values(&self) -> impl Iterator<Item = &T> {
        self.entries.iter().map(|(_, t)| t)
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Sets `dev`'s value, replacing any.
    pub fn insert(&mut self, dev: Dev, value: T) {
        match self.position(&dev) {
            Some(at) => self.entries[at].1 = value,
            None => {
                self.entries.push((dev, value));
                self.index.insert(dev, self.entries.len() - 1);
            }
        }
    }

    /// Empties the map, handing out its entries in insertion order.
    pub fn take_entries(&mut self) -> Vec<(Dev, T)> {
        self.index.clear();
        self.last.set(0);
        std::mem::take(&mut self.entries)
    }
}

impl<T: Default> DevMap<T> {
    pub fn entry_or_default(&mut self, dev: Dev) -> &mut T {
        self.get_or_insert_with(dev, T::default)
    }
}

impl<T> std::ops::Index<&Dev> for DevMap<T> {
    type Output = T;

    fn index(&self, dev: &Dev) -> &T {
        self.get(dev).expect("no such device in the map")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_each_device_whatever_the_last_hit() {
        let mut m: DevMap<u32> = DevMap::default();
        let devs: Vec<Dev> = (0..50).map(|i| Dev { major: 8, minor: i }).collect();
        for (n, d) in devs.iter().enumerate() {
            *m.entry_or_default(*d) += n as u32;
        }
        for (n, d) in devs.iter().enumerate().rev() {
            assert_eq!(m[d], n as u32);
            assert_eq!(m.get(d), Some(&(n as u32)));
        }
        assert_eq!(m.len(), 50);
        assert!(m.get(&Dev { major: 9, minor: 0 }).is_none());
        *m.get_mut(&devs[3]).unwrap() = 99;
        assert_eq!(m[&devs[3]], 99);
    }
}
