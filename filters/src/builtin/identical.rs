//! `identical`: the default filter. Identical payloads become one group with their sources
//! unioned (OMIS's unification rule); groups leave ordered by their smallest id.

use std::collections::HashMap;

use bytes::Bytes;
use sdm_proto::IdSet;

use crate::{Filter, FilterError, Group, sort_groups};

/// Merges identical payloads.
#[derive(Debug, Default)]
pub struct Identical {
    groups: HashMap<Bytes, IdSet>,
}

impl Identical {
    /// An empty filter.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Filter for Identical {
    fn name(&self) -> &str {
        "identical"
    }

    fn fold(&mut self, payload: &[u8], sources: &IdSet) -> Result<(), FilterError> {
        match self.groups.get_mut(payload) {
            Some(ids) => ids.union_with(sources),
            None => {
                self.groups
                    .insert(Bytes::copy_from_slice(payload), sources.clone());
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<Vec<Group>, FilterError> {
        let mut out: Vec<Group> = self
            .groups
            .drain()
            .map(|(payload, sources)| Group { payload, sources })
            .collect();
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
}
