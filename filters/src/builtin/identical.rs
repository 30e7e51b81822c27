//! `identical`: the default filter. Identical payloads become one group with their sources
//! unioned (OMIS's unification rule); groups leave ordered by their smallest id.
//!
//! This is the overlay's hot path. With few groups (the usual case: one) a payload is compared
//! byte for byte with each group's; beyond [`SCAN_LIMIT`] groups they are found by their XXH3
//! hash (the one carried upstream, [`sdm_proto::payload_hash`]) and confirmed byte for byte,
//! so a hash collision never merges different payloads.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use bytes::Bytes;
use sdm_proto::{IdSet, payload_hash};

use crate::{Filter, FilterError, Group, sort_groups};

/// Up to this many groups a fold compares payloads one by one; beyond, it finds them by hash.
const SCAN_LIMIT: usize = 8;

/// Merges identical payloads.
#[derive(Debug, Default)]
pub struct Identical {
    /// The groups, in the order they were made.
    groups: Vec<Group>,
    /// XXH3 hash of a payload → position of its group, once there are more than
    /// [`SCAN_LIMIT`] groups. Of payloads whose hashes collide, the index names the first.
    index: HashMap<u64, usize, BuildHasherDefault<HashIsKey>>,
}

/// Hashes a key that already is a hash (XXH3-64) by taking it as it is.
#[derive(Debug, Default)]
struct HashIsKey(u64);

impl Hasher for HashIsKey {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        // Only u64 keys are hashed here; fold any other input in for completeness.
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ u64::from(b);
        }
    }

    fn write_u64(&mut self, h: u64) {
        self.0 = h;
    }
}

impl Identical {
    /// An empty filter.
    pub fn new() -> Self {
        Self::default()
    }

    /// The position of the group holding exactly `payload`, if any; `h` is its hash once
    /// the index is in use.
    fn find(&self, h: Option<u64>, payload: &[u8]) -> Option<usize> {
        if let Some(h) = h.filter(|_| self.groups.len() > SCAN_LIMIT) {
            let i = *self.index.get(&h)?;
            if self.groups[i].payload[..] == *payload {
                return Some(i);
            }
            // A hash collision: confirm byte for byte against every group.
        }
        self.groups.iter().position(|g| g.payload[..] == *payload)
    }

    /// Adds `sources` to the group of `payload`, keeping a copy of it if it is new.
    fn add(&mut self, payload: &[u8], sources: &IdSet) {
        let n = self.groups.len();
        let h = (n >= SCAN_LIMIT).then(|| payload_hash(payload));
        if let Some(i) = self.find(h, payload) {
            self.groups[i].sources.union_with(sources);
            return;
        }
        self.groups.push(Group {
            payload: Bytes::copy_from_slice(payload),
            sources: sources.clone(),
        });
        match h {
            Some(h) if n > SCAN_LIMIT => {
                self.index.entry(h).or_insert(n);
            }
            Some(_) => {
                for (i, g) in self.groups.iter().enumerate() {
                    self.index.entry(payload_hash(&g.payload)).or_insert(i);
                }
            }
            None => {}
        }
    }
}

impl Filter for Identical {
    fn name(&self) -> &str {
        "identical"
    }

    fn fold(&mut self, payload: &[u8], sources: &IdSet) -> Result<(), FilterError> {
        self.add(payload, sources);
        Ok(())
    }

    fn flush(&mut self) -> Result<Vec<Group>, FilterError> {
        self.index.clear();
        let mut out = std::mem::take(&mut self.groups);
        sort_groups(&mut out);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merges_and_orders() {
        let mut f = Identical::new();
        f.fold(b"b", &IdSet::single(3)).unwrap();
        f.fold(b"a", &IdSet::single(5)).unwrap();
        f.fold(b"b", &IdSet::single(0)).unwrap();
        let g = f.flush().unwrap();
        assert_eq!(g.len(), 2);
        assert_eq!(
            (&g[0].payload[..], g[0].sources.to_string()),
            (&b"b"[..], "[0,3]".into())
        );
        assert_eq!(
            (&g[1].payload[..], g[1].sources.to_string()),
            (&b"a"[..], "[5]".into())
        );
        assert!(f.flush().unwrap().is_empty());
    }

    #[test]
    fn colliding_hashes_stay_apart() {
        let mut f = Identical::new();
        for i in 0..20 {
            f.fold(format!("filler {i}").as_bytes(), &IdSet::single(100 + i))
                .unwrap();
        }
        // Force a collision: the index sends the hash of "a" to a group holding other bytes.
        f.groups
            .push(Group::new(Bytes::from_static(b"not a"), IdSet::single(9)));
        f.index.insert(payload_hash(b"a"), f.groups.len() - 1);
        f.fold(b"a", &IdSet::single(1)).unwrap();
        f.fold(b"a", &IdSet::single(2)).unwrap();
        let g = f.flush().unwrap();
        assert_eq!(g.len(), 22);
        assert_eq!(
            (&g[0].payload[..], g[0].sources.to_string()),
            (&b"a"[..], "[1-2]".into())
        );
        assert_eq!(
            (&g[1].payload[..], g[1].sources.to_string()),
            (&b"not a"[..], "[9]".into())
        );
        assert!(f.flush().unwrap().is_empty());
    }

    #[test]
    fn many_groups_through_the_index() {
        let mut f = Identical::new();
        for round in 0..3 {
            for i in 0..100u32 {
                f.fold(
                    format!("p{}", i % 40).as_bytes(),
                    &IdSet::single(i + 100 * round),
                )
                .unwrap();
            }
        }
        let g = f.flush().unwrap();
        assert_eq!(g.len(), 40);
        // p0..p19 come 3 times a round, p20..p39 twice.
        assert!(g.iter().all(|g| [6, 9].contains(&g.sources.len())), "{g:?}");
        assert_eq!(g.iter().map(|g| g.sources.len()).sum::<u64>(), 300);
    }
}
