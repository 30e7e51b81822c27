//! A node's ops in flight, by op id: a few in a short vector searched in order, more in a
//! hash table.
//!
//! A server of the simulator's million has one op in flight, and a daemon answering round
//! trips one at a time has one: a vector of them costs no hash per lookup and no table (a
//! hash table keeps at least four slots and a control block even for one op). A node with
//! more in flight at once (a front-end's window of commands) finds them by hash, and keeps
//! its table until it is shrunk ([`OpTable::shrink_to_fit`], which a daemon never calls
//! and the simulator calls after each event): a leaf whose every wake-up takes in a window
//! of commands and answers them all would otherwise make and free a table per wake-up.

use std::collections::HashMap;

/// Ops kept in the vector at most: one more moves them all into a hash table.
pub(crate) const FEW: usize = 4;

/// How the table hashes op ids once it has many: Fx, a few instructions per id. Op ids come
/// from the authenticated front-end, so nobody can pick ids that collide.
type OpHasher = rustc_hash::FxBuildHasher;

/// Values (a node's ops) by op id.
#[derive(Debug)]
pub(crate) enum OpTable<V> {
    /// At most [`FEW`], in the order they were inserted.
    Few(Vec<(u64, V)>),
    /// More than [`FEW`] at some point since the table was last cleared or shrunk.
    Many(HashMap<u64, V, OpHasher>),
}

impl<V> Default for OpTable<V> {
    fn default() -> Self {
        Self::Few(Vec::new())
    }
}

impl<V> OpTable<V> {
    /// How many ops are in.
    pub(crate) fn len(&self) -> usize {
        match self {
            Self::Few(v) => v.len(),
            Self::Many(m) => m.len(),
        }
    }

    /// Whether no op is in.
    pub(crate) fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether op `op` is in.
    pub(crate) fn contains_key(&self, op: u64) -> bool {
        match self {
            Self::Few(v) => v.iter().any(|(k, _)| *k == op),
            Self::Many(m) => m.contains_key(&op),
        }
    }

    /// Op `op`, if it is in.
    pub(crate) fn get_mut(&mut self, op: u64) -> Option<&mut V> {
        match self {
            Self::Few(v) => v.iter_mut().find(|(k, _)| *k == op).map(|(_, p)| p),
            Self::Many(m) => m.get_mut(&op),
        }
    }

    /// Puts `value` in as op `op`; the value it replaces, if `op` was in.
    pub(crate) fn insert(&mut self, op: u64, value: V) -> Option<V> {
        match self {
            Self::Few(v) => {
                if let Some(slot) = v.iter_mut().find(|(k, _)| *k == op) {
                    return Some(std::mem::replace(&mut slot.1, value));
                }
                if v.len() < FEW {
                    v.push((op, value));
                    return None;
                }
                // Room for a front-end's default window of 16 ops without growing.
                let mut m: HashMap<u64, V, OpHasher> =
                    HashMap::with_capacity_and_hasher(4 * FEW, OpHasher::default());
                m.extend(v.drain(..));
                m.insert(op, value);
                *self = Self::Many(m);
                None
            }
            Self::Many(m) => m.insert(op, value),
        }
    }

    /// Takes op `op` out, if it is in (the others keep their order while few).
    pub(crate) fn remove(&mut self, op: u64) -> Option<V> {
        match self {
            Self::Few(v) => {
                let i = v.iter().position(|(k, _)| *k == op)?;
                Some(v.remove(i).1)
            }
            Self::Many(m) => m.remove(&op),
        }
    }

    /// Takes every op out, and gives back the table's room.
    pub(crate) fn clear(&mut self) {
        *self = Self::default();
    }

    /// The ids of the ops in: in the order they came while there are few (by id after a
    /// move back from a hash table), in no order while there are many.
    pub(crate) fn ids(&self) -> Vec<u64> {
        match self {
            Self::Few(v) => v.iter().map(|(k, _)| *k).collect(),
            Self::Many(m) => m.keys().copied().collect(),
        }
    }

    /// The ops in, in the order of [`OpTable::ids`].
    #[cfg(test)]
    pub(crate) fn values(&self) -> impl Iterator<Item = &V> {
        let (few, many) = match self {
            Self::Few(v) => (Some(v.iter().map(|(_, p)| p)), None),
            Self::Many(m) => (None, Some(m.values())),
        };
        few.into_iter().flatten().chain(many.into_iter().flatten())
    }

    /// Gives back the room the table does not use: a table holding few ops again becomes
    /// a vector.
    pub(crate) fn shrink_to_fit(&mut self) {
        match self {
            Self::Few(v) => v.shrink_to_fit(),
            Self::Many(m) if m.len() <= FEW => {
                let mut v: Vec<(u64, V)> = m.drain().collect();
                // In the order they came, as far as ids tell it (they mostly grow).
                v.sort_unstable_by_key(|(k, _)| *k);
                *self = Self::Few(v);
            }
            Self::Many(m) => m.shrink_to_fit(),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use proptest::prelude::*;

    use super::{FEW, OpTable};

    #[derive(Debug, Clone)]
    enum Step {
        Insert(u64),
        Remove(u64),
        Get(u64),
        Clear,
        Shrink,
    }

    fn step() -> impl Strategy<Value = Step> {
        // Ids from a range wide enough to pass FEW ops in flight, narrow enough to hit.
        let id = 0..(3 * FEW as u64);
        prop_oneof![
            6 => id.clone().prop_map(Step::Insert),
            4 => id.clone().prop_map(Step::Remove),
            3 => id.prop_map(Step::Get),
            1 => Just(Step::Clear),
            1 => Just(Step::Shrink),
        ]
    }

    proptest! {
        /// The table holds what a hash map holds after the same steps, across the move to
        /// a hash table and back, and lists its ops in the order they came while few (by
        /// id after a move back).
        #[test]
        fn the_table_holds_what_a_map_holds(steps in proptest::collection::vec(step(), 0..400)) {
            let mut t: OpTable<u64> = OpTable::default();
            let mut model: HashMap<u64, u64> = HashMap::new();
            let mut order: Vec<u64> = Vec::new();
            for (n, s) in steps.into_iter().enumerate() {
                let n = n as u64;
                match s {
                    Step::Insert(op) => {
                        prop_assert_eq!(t.insert(op, n), model.insert(op, n));
                        if !order.contains(&op) {
                            order.push(op);
                        }
                    }
                    Step::Remove(op) => {
                        prop_assert_eq!(t.remove(op), model.remove(&op));
                        order.retain(|&k| k != op);
                    }
                    Step::Get(op) => {
                        prop_assert_eq!(t.contains_key(op), model.contains_key(&op));
                        // Written through, as a node updates its op.
                        match (t.get_mut(op), model.get_mut(&op)) {
                            (Some(v), Some(w)) => {
                                prop_assert_eq!(*v, *w);
                                *v += 1000;
                                *w += 1000;
                            }
                            (None, None) => {}
                            (v, w) => prop_assert!(false, "table {:?}, map {:?}", v, w),
                        }
                    }
                    Step::Clear => {
                        t.clear();
                        model.clear();
                        order.clear();
                        prop_assert!(matches!(&t, OpTable::Few(v) if v.is_empty()));
                    }
                    Step::Shrink => {
                        let was_many = matches!(t, OpTable::Many(_));
                        t.shrink_to_fit();
                        if was_many {
                            // A table made a vector again lists its ops by id.
                            order.sort_unstable();
                        }
                        if model.len() <= FEW {
                            prop_assert!(matches!(t, OpTable::Few(_)), "few ops, shrunk: a vector");
                        }
                    }
                }
                prop_assert_eq!(t.len(), model.len());
                prop_assert_eq!(t.is_empty(), model.is_empty());
                let mut ids = t.ids();
                if let OpTable::Few(_) = t {
                    prop_assert!(ids.len() <= FEW);
                    prop_assert_eq!(&ids, &order);
                }
                ids.sort_unstable();
                let mut want: Vec<u64> = model.keys().copied().collect();
                want.sort_unstable();
                prop_assert_eq!(ids, want);
                // The values come in the order of the ids.
                let values: Vec<u64> = t.values().copied().collect();
                let want: Vec<u64> = t.ids().iter().map(|k| model[k]).collect();
                prop_assert_eq!(values, want);
            }
        }
    }

    /// Past FEW ops the table hashes them; emptied and shrunk, it is a vector again.
    #[test]
    fn many_ops_move_to_a_hash_table_and_back() {
        let mut t: OpTable<u64> = OpTable::default();
        for op in 0..=FEW as u64 {
            t.insert(op, op);
        }
        assert!(matches!(t, OpTable::Many(_)));
        assert_eq!(t.len(), FEW + 1);
        for op in 0..=FEW as u64 {
            assert_eq!(t.remove(op), Some(op));
        }
        assert!(matches!(&t, OpTable::Many(m) if m.is_empty()));
        t.shrink_to_fit();
        assert!(matches!(&t, OpTable::Few(v) if v.is_empty()));
        // Shrunk while it holds a few: a vector of them, by id.
        for op in [9, 3, 7, 1, 5, 8] {
            t.insert(op, op);
        }
        assert!(matches!(t, OpTable::Many(_)));
        t.remove(8);
        t.remove(5);
        t.shrink_to_fit();
        assert_eq!(t.ids(), vec![1, 3, 7, 9]);
        assert!(matches!(t, OpTable::Few(_)));
    }
}
