//! The OMIS service table and its extension mechanism (OMIS 1.0 chapter 6): service names
//! map to handlers; each extension owns one prefix and registers its services under it.
//!
//! Rules (section 6.2): the base services have no prefix and keep their bare names (`stop`,
//! `process_info`). An extension is added with its prefix and a register function (the
//! spec's `<prefix>register`), which registers each of its services by a short name; the
//! service is then called `<prefix>_<name>` (prefix `pe`, name `start_integrator`:
//! `pe_start_integrator`). One prefix per extension: a second extension with a prefix already
//! taken is refused, and so is a prefix nested in another one (`pe` and `pe_x`), since then
//! one service name could belong to both. An extension whose services would collide with
//! names already in the table is refused as a whole: nothing of it is added.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use super::ast::{BasicRequest, Value};
use super::status::{ErrorKind, ServiceError};

/// The function behind a service: gets the context `C` (the node's monitor state) and the
/// basic request, returns the result parameters.
pub type Handler<C> =
    Box<dyn Fn(&mut C, &BasicRequest) -> Result<Vec<Value>, ServiceError> + Send + Sync>;

/// Boxes a closure as a [`Handler`], so that its argument types are inferred:
/// `handler(|ctx: &mut Monitor, req| Ok(vec![Value::Int(0)]))`.
pub fn handler<C, F>(f: F) -> Handler<C>
where
    F: Fn(&mut C, &BasicRequest) -> Result<Vec<Value>, ServiceError> + Send + Sync + 'static,
{
    Box::new(f)
}

/// One service in the table.
struct Entry<C> {
    handler: Handler<C>,
    /// The extension's prefix; empty for a base service.
    prefix: String,
}

/// The service table: service name to handler, filled by the base monitor and by extensions.
pub struct Registry<C> {
    services: BTreeMap<String, Entry<C>>,
    prefixes: BTreeSet<String>,
    /// Other spellings of services (the spec's `continue` for `cont`): alias to name.
    aliases: BTreeMap<String, String>,
}

/// Handed to an extension's register function by [`Registry::add_extension`]; collects the
/// extension's services under its prefix.
pub struct ExtensionRegistrar<'a, C> {
    prefix: &'a str,
    pending: Vec<(String, Handler<C>)>,
    problems: Vec<String>,
}

impl<C> ExtensionRegistrar<'_, C> {
    /// The extension's prefix, e.g. `pe`.
    pub fn prefix(&self) -> &str {
        self.prefix
    }

    /// Registers the service `name` (without the prefix) as `<prefix>_<name>`. A bad or
    /// repeated name makes [`Registry::add_extension`] fail.
    pub fn register(&mut self, name: &str, h: Handler<C>) {
        let full = format!("{}_{name}", self.prefix);
        if name.is_empty() || !name.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'_') {
            self.problems.push(format!(
                "service name '{name}' of extension '{}' is not made of letters, digits and '_'",
                self.prefix
            ));
        } else if self.pending.iter().any(|(n, _)| *n == full) {
            self.problems.push(format!(
                "extension '{}' registers '{full}' twice",
                self.prefix
            ));
        } else {
            self.pending.push((full, h));
        }
    }
}

impl<C> Registry<C> {
    /// An empty table: no base services, no extensions.
    pub fn new() -> Self {
        Self {
            services: BTreeMap::new(),
            prefixes: BTreeSet::new(),
            aliases: BTreeMap::new(),
        }
    }

    /// Adds the extension with `prefix`: runs `register`, which registers the extension's
    /// services through the [`ExtensionRegistrar`]. Fails, adding nothing, if the prefix is
    /// empty or not a C identifier, is taken or nested in (or around) a taken prefix, or if a
    /// service name is bad, repeated or already in the table.
    pub fn add_extension(
        &mut self,
        prefix: &str,
        register: impl FnOnce(&mut ExtensionRegistrar<'_, C>),
    ) -> Result<(), ServiceError> {
        if prefix.is_empty() {
            return Err(ServiceError::new(
                ErrorKind::Registration,
                "the empty prefix belongs to the base services (use register_base)",
            ));
        }
        let mut bytes = prefix.bytes();
        let ident = bytes
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == b'_')
            && bytes.all(|c| c.is_ascii_alphanumeric() || c == b'_');
        if !ident {
            return Err(ServiceError::new(
                ErrorKind::Registration,
                format!("extension prefix '{prefix}' is not a C identifier"),
            ));
        }
        if self.prefixes.contains(prefix) {
            return Err(ServiceError::new(
                ErrorKind::Registration,
                format!("extension prefix '{prefix}' is already taken (one prefix per extension)"),
            ));
        }
        let nested = |outer: &str, inner: &str| {
            inner.len() > outer.len()
                && inner.starts_with(outer)
                && inner.as_bytes()[outer.len()] == b'_'
        };
        if let Some(other) = self
            .prefixes
            .iter()
            .find(|q| nested(q, prefix) || nested(prefix, q))
        {
            return Err(ServiceError::new(
                ErrorKind::Registration,
                format!(
                    "extension prefix '{prefix}' overlaps extension prefix '{other}' \
                 (their service names could clash)"
                ),
            ));
        }
        let mut reg = ExtensionRegistrar {
            prefix,
            pending: Vec::new(),
            problems: Vec::new(),
        };
        register(&mut reg);
        let mut problems = reg.problems;
        for (name, _) in &reg.pending {
            if let Some(target) = self.aliases.get(name) {
                problems.push(format!(
                    "service '{name}' already exists (a name for '{target}')"
                ));
            } else if let Some(e) = self.services.get(name) {
                let owner = if e.prefix.is_empty() {
                    "a base service".to_owned()
                } else {
                    format!("from extension '{}'", e.prefix)
                };
                problems.push(format!("service '{name}' already exists ({owner})"));
            }
        }
        if !problems.is_empty() {
            return Err(ServiceError::new(
                ErrorKind::Registration,
                format!("extension '{prefix}' not added: {}", problems.join("; ")),
            ));
        }
        for (name, handler) in reg.pending {
            let prefix = prefix.to_owned();
            self.services.insert(name, Entry { handler, prefix });
        }
        self.prefixes.insert(prefix.to_owned());
        Ok(())
    }

    /// Registers a base service under its bare name (`stop`, `process_info`). It replaces any
    /// service already registered under that name, so register base services before adding
    /// extensions.
    pub fn register_base(&mut self, name: &str, h: Handler<C>) {
        self.aliases.remove(name);
        self.services.insert(
            name.to_owned(),
            Entry {
                handler: h,
                prefix: String::new(),
            },
        );
    }

    /// Makes `alias` another name of the registered service `name` (OMIS 1.0 section 8
    /// spells `continue` what sdm registers as `cont`). Fails if `name` is not registered
    /// (aliases of aliases included) or `alias` is already a service or an alias.
    pub fn register_alias(&mut self, alias: &str, name: &str) -> Result<(), ServiceError> {
        if !self.services.contains_key(name) {
            return Err(ServiceError::new(
                ErrorKind::Registration,
                format!("alias '{alias}': no service '{name}' to name"),
            ));
        }
        if self.services.contains_key(alias) || self.aliases.contains_key(alias) {
            return Err(ServiceError::new(
                ErrorKind::Registration,
                format!("alias '{alias}': the name is already taken"),
            ));
        }
        self.aliases.insert(alias.to_owned(), name.to_owned());
        Ok(())
    }

    /// The handler for `service` (or for the service it is an alias of), if registered.
    pub fn get(&self, service: &str) -> Option<&Handler<C>> {
        let name = self.aliases.get(service).map_or(service, String::as_str);
        self.services.get(name).map(|e| &e.handler)
    }

    /// Every service name and alias, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut v: Vec<String> = self
            .services
            .keys()
            .chain(self.aliases.keys())
            .cloned()
            .collect();
        v.sort();
        v
    }

    /// The prefixes of the extensions added, sorted (what OMIS's `extensions()` returns).
    pub fn prefixes(&self) -> Vec<String> {
        self.prefixes.iter().cloned().collect()
    }

    /// Runs the service `req.service` on `ctx`. An unknown service is an error naming it and
    /// the known ones.
    pub fn call(&self, ctx: &mut C, req: &BasicRequest) -> Result<Vec<Value>, ServiceError> {
        match self.get(&req.service) {
            Some(h) => h(ctx, req),
            None => {
                let known = if self.services.is_empty() {
                    "none".to_owned()
                } else {
                    self.names().join(", ")
                };
                Err(ServiceError::new(
                    ErrorKind::UnknownService,
                    format!("unknown service '{}' (known: {known})", req.service),
                ))
            }
        }
    }
}

impl<C> Default for Registry<C> {
    fn default() -> Self {
        Self::new()
    }
}

impl<C> fmt::Debug for Registry<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registry")
            .field("services", &self.services.keys().collect::<Vec<_>>())
            .field("prefixes", &self.prefixes)
            .field("aliases", &self.aliases)
            .finish()
    }
}

impl<C> fmt::Debug for ExtensionRegistrar<'_, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExtensionRegistrar")
            .field("prefix", &self.prefix)
            .field(
                "pending",
                &self.pending.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .finish()
    }
}
