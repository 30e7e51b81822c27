//! [`FilterError`]: what went wrong in which filter, with which input (and from which ids).
//! Filters never panic on bad input; they return one of these and leave their state as it was.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;

use sdm_proto::IdSet;

/// What kind of failure a [`FilterError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// A payload could not be read as the filter's input type.
    BadInput,
    /// A record written by a different (newer) version of the encoding.
    Version,
    /// An exact result does not fit its type (for example a 128-bit decimal sum).
    Overflow,
    /// The registry knows no filter by this name.
    UnknownFilter,
    /// The filter's parameters (after `name:`) are wrong.
    BadParameters,
    /// A filter name is already registered.
    Duplicate,
    /// A plugin could not be loaded (missing file, missing symbol, ABI version mismatch).
    PluginLoad,
    /// A plugin call returned an error or panicked.
    Plugin,
}

/// A filter failure: which filter, what was wrong, and the ids whose input caused it.
///
/// The message reads `filter "sum": payload from [3] is not a decimal number: "abc"`; the
/// error underneath (a parser's, the plugin loader's), if any, is its
/// [`source`](StdError::source).
#[derive(Debug, Clone)]
pub struct FilterError {
    filter: String,
    kind: ErrorKind,
    what: String,
    sources: Option<IdSet>,
    // Shared, so the error stays `Clone`.
    source: Option<Arc<dyn StdError + Send + Sync>>,
}

/// Equal when filter, kind, message and ids are; the source is not compared.
impl PartialEq for FilterError {
    fn eq(&self, other: &Self) -> bool {
        (&self.filter, self.kind, &self.what, &self.sources)
            == (&other.filter, other.kind, &other.what, &other.sources)
    }
}

impl Eq for FilterError {}

impl FilterError {
    /// A failure of `filter` of `kind`, described by `what`.
    pub fn new(filter: impl Into<String>, kind: ErrorKind, what: impl Into<String>) -> Self {
        Self {
            filter: filter.into(),
            kind,
            what: what.into(),
            sources: None,
            source: None,
        }
    }

    /// A payload from `sources` that `filter` could not read.
    pub fn bad_input(filter: &str, sources: &IdSet, what: impl fmt::Display) -> Self {
        Self::new(
            filter,
            ErrorKind::BadInput,
            format!("payload from {sources} {what}"),
        )
        .with_sources(sources)
    }

    /// The same error, naming the ids whose input caused it.
    pub fn with_sources(mut self, sources: &IdSet) -> Self {
        self.sources = Some(sources.clone());
        self
    }

    /// The same error, caused by `source` (kept as the [`source`](StdError::source); the
    /// message is not changed).
    pub fn caused_by(mut self, source: impl Into<Box<dyn StdError + Send + Sync>>) -> Self {
        self.source = Some(Arc::from(source.into()));
        self
    }

    /// The filter's name (as it was asked for, with parameters).
    pub fn filter(&self) -> &str {
        &self.filter
    }

    /// The kind of failure.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// What was wrong, without the filter's name.
    pub fn what(&self) -> &str {
        &self.what
    }

    /// The ids whose input caused the failure, when one input did.
    pub fn sources(&self) -> Option<&IdSet> {
        self.sources.as_ref()
    }
}

impl fmt::Display for FilterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "filter {:?}: {}", self.filter, self.what)
    }
}

impl StdError for FilterError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn StdError + 'static))
    }
}

/// Shows at most 40 bytes of a payload in an error message.
pub(crate) fn excerpt(payload: &[u8]) -> String {
    let cut = &payload[..payload.len().min(40)];
    let text = String::from_utf8_lossy(cut);
    if payload.len() > cut.len() {
        format!("{text:?}… ({} bytes)", payload.len())
    } else {
        format!("{text:?}")
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;
    use crate::decimal::DecimalError;
    use crate::plugin::{LoadError, Plugin};

    /// A plugin that does not load keeps the loader's error as the source; the message
    /// still says why.
    #[test]
    fn plugin_load_keeps_the_loader_error() {
        let e = Plugin::load(std::path::Path::new("/nonexistent/libnothing.so")).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::PluginLoad);
        assert!(e.what().contains("cannot load plugin"), "{e}");
        let load = e.source().and_then(|s| s.downcast_ref::<LoadError>());
        assert!(matches!(load, Some(LoadError::Open { .. })), "{e:?}");
        assert!(load.unwrap().source().is_some(), "the loader's own reason");
    }

    /// A payload that does not parse keeps the parser's error as the source.
    #[test]
    fn bad_input_keeps_the_parser_error() {
        let e = crate::record::scalar("sum", b"abc", &IdSet::single(3)).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadInput);
        assert!(e.source().is_some_and(|s| s.is::<DecimalError>()), "{e:?}");
        let e = crate::record::decode::<u32>("sum", "sum", b"{", &IdSet::single(3)).unwrap_err();
        assert!(
            e.source().is_some_and(|s| s.is::<serde_json::Error>()),
            "{e:?}"
        );
    }
}
