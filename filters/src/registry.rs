//! [`Registry`]: filters by name. A command names its filter as `name` or `name:params`
//! (`histogram:0:100:10`); the registry makes a fresh [`Filter`] for each op or stream wave.

use std::path::Path;
use std::sync::Arc;

use crate::error::{ErrorKind, FilterError};
use crate::{Filter, builtin, plugin};

/// Makes a filter from the parameters after `name:` (empty if none). Called once per op.
pub type Factory = Arc<dyn Fn(&str) -> Result<Box<dyn Filter>, FilterError> + Send + Sync>;

/// The filters a node knows, by name: the built-ins and any loaded plugins.
#[derive(Clone)]
pub struct Registry {
    /// Looked up once per op at every node, by a short name.
    factories: std::collections::HashMap<String, Factory, rustc_hash::FxBuildHasher>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.names()).finish()
    }
}

impl Default for Registry {
    fn default() -> Self {
        Self::new()
    }
}

impl Registry {
    /// A registry holding every built-in filter (see the crate docs for the list).
    pub fn new() -> Self {
        let mut r = Self::empty();
        builtin::register_all(&mut r);
        r
    }

    /// A spec that makes each built-in filter, in a fixed order, with sample parameters
    /// where a filter needs them (`histogram` twice: whole and fractional, negative
    /// bounds). For tests, fuzzers and examples that want to exercise every built-in.
    pub const BUILTIN_SPECS: &'static [&'static str] = &[
        "identical",
        "sum",
        "min",
        "max",
        "count",
        "mean",
        "histogram:0:100:10",
        "histogram:-1.5:2.5:3",
        "concat",
        "stats",
        "stacktrace",
        "lines",
        "counters",
        "statements",
    ];

    /// A registry with no filters.
    pub fn empty() -> Self {
        Self {
            factories: Default::default(),
        }
    }

    /// Registers `factory` under `name` (no `:`); a name already taken is refused.
    pub fn register(
        &mut self,
        name: &str,
        factory: impl Fn(&str) -> Result<Box<dyn Filter>, FilterError> + Send + Sync + 'static,
    ) -> Result<(), FilterError> {
        if name.is_empty() || name.contains(':') {
            return Err(FilterError::new(
                name,
                ErrorKind::BadParameters,
                "a filter name must be non-empty and hold no ':'",
            ));
        }
        if self.factories.contains_key(name) {
            return Err(FilterError::new(
                name,
                ErrorKind::Duplicate,
                "a filter by this name is already registered",
            ));
        }
        self.factories.insert(name.to_owned(), Arc::new(factory));
        Ok(())
    }

    /// Loads the plugin at `path` (see [`plugin`]) and registers it under the name it
    /// declares; returns that name.
    pub fn load_plugin(&mut self, path: impl AsRef<Path>) -> Result<String, FilterError> {
        let p = plugin::Plugin::load(path.as_ref())?;
        let name = p.name().to_owned();
        let p = Arc::new(p);
        self.register(&name, move |params| p.create(params))?;
        Ok(name)
    }

    /// A fresh filter for `spec` (`name` or `name:params`; empty means `identical`).
    pub fn create(&self, spec: &str) -> Result<Box<dyn Filter>, FilterError> {
        let (name, params) = split_spec(spec);
        let f = self.factories.get(name).ok_or_else(|| {
            FilterError::new(
                spec,
                ErrorKind::UnknownFilter,
                format!(
                    "no such filter; known: {}",
                    self.names().collect::<Vec<_>>().join(", ")
                ),
            )
        })?;
        f(params)
    }

    /// Whether `spec`'s name is registered (its parameters are not checked).
    pub fn contains(&self, spec: &str) -> bool {
        self.factories.contains_key(split_spec(spec).0)
    }

    /// The registered names, sorted.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        let mut v: Vec<&str> = self.factories.keys().map(String::as_str).collect();
        v.sort_unstable();
        v.into_iter()
    }
}

/// `name:params` → (`name`, `params`); `""` → `identical`.
fn split_spec(spec: &str) -> (&str, &str) {
    // A byte scan: a spec is a few ASCII letters.
    match spec.bytes().position(|b| b == b':') {
        Some(i) => (&spec[..i], &spec[i + 1..]),
        None if spec.is_empty() => ("identical", ""),
        None => (spec, ""),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thread_safety() {
        fn send<T: Send>() {}
        fn send_sync<T: Send + Sync>() {}
        send::<Box<dyn Filter>>();
        send_sync::<Registry>();
        send_sync::<FilterError>();
    }

    /// Every built-in that takes numbers is, once flushed, as a fresh one: folding other
    /// replies into it gives what a fresh filter gives, and nothing is left after.
    #[test]
    fn built_ins_after_a_flush_are_as_new() {
        let r = Registry::new();
        let first: [(&[u8], &str); 3] = [(b"7", "[0-3]"), (b"-2.5", "[4]"), (b"7", "[9]")];
        let second: [(&[u8], &str); 3] = [(b"1", "[5]"), (b"0.25", "[6-7]"), (b"1", "[8]")];
        let fold = |f: &mut Box<dyn Filter>, inputs: &[(&[u8], &str)]| {
            for (payload, ids) in inputs {
                f.fold(payload, &ids.parse().unwrap())?;
            }
            f.flush()
        };
        let mut covered = Vec::new();
        for spec in Registry::BUILTIN_SPECS {
            let mut kept = r.create(spec).unwrap();
            // Filters of records or key/value lines refuse numbers.
            let Ok(once) = fold(&mut kept, &first) else {
                continue;
            };
            covered.push(*spec);
            assert!(!once.is_empty(), "{spec}");
            let again = fold(&mut kept, &second).unwrap();
            let fresh = fold(&mut r.create(spec).unwrap(), &second).unwrap();
            assert_eq!(again, fresh, "{spec}");
            assert!(
                kept.flush().unwrap().is_empty(),
                "{spec}: state after a flush"
            );
        }
        for spec in ["identical", "sum", "min", "max", "count", "mean"] {
            assert!(covered.contains(&spec), "{spec} not covered: {covered:?}");
        }
        // What the scalar ones give (7 + 2 + 7 + 3 from 8 ids).
        let inputs: [(&[u8], &str); 4] = [
            (b"7", "[0-3]"),
            (b"2", "[4]"),
            (b"7", "[9]"),
            (b"3", "[6-7]"),
        ];
        for (spec, want) in [("sum", "19"), ("min", "2"), ("max", "7"), ("count", "8")] {
            let out = fold(&mut r.create(spec).unwrap(), &inputs).unwrap();
            assert_eq!(out.len(), 1, "{spec}");
            assert_eq!(&out[0].payload[..], want.as_bytes(), "{spec}");
            assert_eq!(out[0].sources.to_string(), "[0-4,6-7,9]", "{spec}");
        }
    }

    #[test]
    fn names_and_errors() {
        let r = Registry::new();
        for n in Registry::BUILTIN_SPECS {
            assert!(r.contains(n), "{n}");
        }
        assert!(r.contains(""));
        assert_eq!(r.create("").unwrap().name(), "identical");
        assert_eq!(
            r.create("histogram:0:10:5").unwrap().name(),
            "histogram:0:10:5"
        );
        let e = r.create("nope").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::UnknownFilter);
        assert!(e.to_string().contains("known: concat"), "{e}");
        let e = r.create("histogram:0:10").unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadParameters);
        assert!(r.create("sum:3").is_err());
        let mut r = r;
        assert_eq!(
            r.register("sum", |_| unreachable!()).unwrap_err().kind(),
            ErrorKind::Duplicate
        );
    }
}
