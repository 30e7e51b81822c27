//! Typed records (encoding version 1): JSON objects that begin with `{"sdm":1,"type":"<t>"`,
//! and the key/value leaf maps that `stats` and `counters` read.
//!
//! A record carries a filter's partial state upward (a mean's sum and count, a histogram's
//! buckets). Decimals are JSON strings in [`Decimal`]'s text form, counts are JSON integers,
//! id-sets are strings in [`IdSet`]'s text form (`"[0-3,7]"`). Maps are written with sorted
//! keys and lists in canonical order, so equal states encode to equal bytes.

use std::collections::BTreeMap;

use bytes::Bytes;
use sdm_proto::IdSet;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::decimal::Decimal;
use crate::error::{ErrorKind, FilterError, excerpt};

/// The record encoding version this build writes and reads.
pub const RECORD_VERSION: u32 = 1;

/// The bytes every record begins with (before the version digits).
pub const RECORD_PREFIX: &[u8] = b"{\"sdm\":";

#[derive(Serialize)]
struct Out<'a, T> {
    sdm: u32,
    #[serde(rename = "type")]
    kind: &'a str,
    #[serde(flatten)]
    body: &'a T,
}

#[derive(Deserialize)]
struct Head {
    sdm: u32,
    #[serde(rename = "type")]
    kind: String,
}

#[derive(Deserialize)]
struct In<T> {
    #[serde(flatten)]
    body: T,
}

/// Whether `payload` is a record (begins with `{"sdm":`, after optional whitespace).
pub fn is_record(payload: &[u8]) -> bool {
    payload.trim_ascii_start().starts_with(RECORD_PREFIX)
}

/// Encodes `body` as a record of type `kind`.
pub fn encode<T: Serialize>(kind: &str, body: &T) -> Bytes {
    let out = Out {
        sdm: RECORD_VERSION,
        kind,
        body,
    };
    Bytes::from(serde_json::to_vec(&out).expect("records serialize to JSON"))
}

/// Decodes a record of type `kind` for `filter`, naming `sources` if it is not one.
pub fn decode<T: DeserializeOwned>(
    filter: &str,
    kind: &str,
    payload: &[u8],
    sources: &IdSet,
) -> Result<T, FilterError> {
    let head: Head = serde_json::from_slice(payload).map_err(|e| {
        FilterError::bad_input(filter, sources, format_args!("is not a record ({e})")).caused_by(e)
    })?;
    if head.sdm != RECORD_VERSION {
        return Err(FilterError::new(
            filter,
            ErrorKind::Version,
            format!(
                "payload from {sources} is a version {} record; this build reads version {RECORD_VERSION}",
                head.sdm
            ),
        )
        .with_sources(sources));
    }
    if head.kind != kind {
        return Err(FilterError::bad_input(
            filter,
            sources,
            format_args!("is a {:?} record, not {kind:?}", head.kind),
        ));
    }
    let v: In<T> = serde_json::from_slice(payload).map_err(|e| {
        FilterError::bad_input(
            filter,
            sources,
            format_args!("is a bad {kind:?} record: {e}"),
        )
        .caused_by(e)
    })?;
    Ok(v.body)
}

/// Reads a payload that is either a record of type `kind` (a partial state flushed below,
/// read for filter `kind`) or a leaf input, read by `leaf`.
pub(crate) fn record_or_leaf<T: DeserializeOwned>(
    kind: &str,
    payload: &[u8],
    sources: &IdSet,
    leaf: impl FnOnce() -> Result<T, FilterError>,
) -> Result<T, FilterError> {
    if is_record(payload) {
        decode(kind, kind, payload, sources)
    } else {
        leaf()
    }
}

/// Reads a scalar payload.
pub fn scalar(filter: &str, payload: &[u8], sources: &IdSet) -> Result<Decimal, FilterError> {
    Decimal::parse(payload).map_err(|e| {
        FilterError::bad_input(filter, sources, format_args!("{e}: {}", excerpt(payload)))
            .caused_by(e)
    })
}

/// Reads a leaf key/value map: a JSON object of numbers or decimal strings, or text lines
/// `key value` / `key=value` (blank lines and lines starting with `#` skipped).
pub fn leaf_map(
    filter: &str,
    payload: &[u8],
    sources: &IdSet,
) -> Result<BTreeMap<String, Decimal>, FilterError> {
    let bad = |what: String| FilterError::bad_input(filter, sources, what);
    let mut out = BTreeMap::new();
    if payload.trim_ascii_start().starts_with(b"{") {
        let map: BTreeMap<String, serde_json::Value> = serde_json::from_slice(payload)
            .map_err(|e| bad(format!("is not a JSON object of numbers ({e})")).caused_by(e))?;
        for (k, v) in map {
            let d = match &v {
                serde_json::Value::Number(n) => n.to_string().parse(),
                serde_json::Value::String(s) => s.parse(),
                _ => {
                    return Err(bad(format!(
                        "has key {k:?} whose value {v} is not a number"
                    )));
                }
            }
            .map_err(|e| bad(format!("has key {k:?} whose value {v} {e}")).caused_by(e))?;
            out.insert(k, d);
        }
        return Ok(out);
    }
    let text = std::str::from_utf8(payload).map_err(|_| bad("is not UTF-8 text".into()))?;
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .or_else(|| line.split_once(char::is_whitespace))
            .ok_or_else(|| bad(format!("has line {line:?}, not `key value`")))?;
        let (k, v) = (k.trim(), v.trim());
        let d = v
            .parse()
            .map_err(|e| bad(format!("has key {k:?} whose value {v:?} {e}")).caused_by(e))?;
        if out.insert(k.to_owned(), d).is_some() {
            return Err(bad(format!("has key {k:?} twice")));
        }
    }
    Ok(out)
}

/// Serde for [`IdSet`] as its text form.
pub mod ids_text {
    use std::str::FromStr;

    use sdm_proto::IdSet;
    use serde::{Deserialize, Deserializer, Serializer};

    /// Writes the text form.
    pub fn serialize<S: Serializer>(ids: &IdSet, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(ids)
    }

    /// Reads the text form.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<IdSet, D::Error> {
        let s = String::deserialize(d)?;
        IdSet::from_str(&s).map_err(|e| serde::de::Error::custom(format!("id-set {s:?}: {e}")))
    }
}

/// An overflow of an exact sum in `filter`.
pub(crate) fn overflow(filter: &str, sources: &IdSet) -> FilterError {
    FilterError::new(
        filter,
        ErrorKind::Overflow,
        format!("folding the payload from {sources} overflows the exact 128-bit decimal range"),
    )
    .with_sources(sources)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Serialize, Deserialize, PartialEq)]
    struct T {
        #[serde(with = "ids_text")]
        ids: IdSet,
        v: Decimal,
        n: u64,
    }

    #[test]
    fn round_trip_and_version() {
        let t = T {
            ids: "[0-3,7]".parse().unwrap(),
            v: "1.5".parse().unwrap(),
            n: 3,
        };
        let b = encode("t", &t);
        assert_eq!(
            &b[..],
            br#"{"sdm":1,"type":"t","ids":"[0-3,7]","v":"1.5","n":3}"#
        );
        assert!(is_record(&b));
        let ids = IdSet::single(1);
        assert_eq!(decode::<T>("f", "t", &b, &ids).unwrap(), t);
        let e = decode::<T>("f", "u", &b, &ids).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadInput);
        let v2 = br#"{"sdm":2,"type":"t"}"#;
        let e = decode::<T>("f", "t", v2, &ids).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Version);
        assert!(e.to_string().contains("version 2"), "{e}");
    }

    #[test]
    fn leaf_maps() {
        let ids = IdSet::single(0);
        let a = leaf_map("f", br#"{"cpu": 12.5, "rss": "1024", "n": 3}"#, &ids).unwrap();
        let b = leaf_map("f", b"cpu 12.5\nrss=1024\n# comment\n\nn 3\n", &ids).unwrap();
        assert_eq!(a, b);
        assert!(leaf_map("f", br#"{"cpu": "x"}"#, &ids).is_err());
        assert!(leaf_map("f", b"cpu\n", &ids).is_err());
        assert!(leaf_map("f", b"a 1\na 2", &ids).is_err());
    }
}
