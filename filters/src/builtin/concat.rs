//! `concat`: keeps every payload, in the order of its smallest source id; `finish` joins
//! them into one payload.
//!
//! Record: `{"sdm":1,"type":"concat","parts":[{"ids":"[0]","text":"…"},
//! {"ids":"[1]","bytes":[255,0]}]}`: UTF-8 parts as `text`, others as `bytes` (a JSON array of
//! byte values). Parts keep their leaf boundaries so subtrees that interleave (k-ary trees)
//! still merge into id order.

use bytes::{Bytes, BytesMut};
use sdm_proto::IdSet;
use serde::{Deserialize, Serialize};

use crate::record::{self, ids_text};
use crate::{Filter, FilterError, Group};

/// One leaf payload in a `concat` record.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConcatPart {
    /// Who sent it.
    #[serde(with = "ids_text")]
    pub ids: IdSet,
    /// The payload, if UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// The payload, if not UTF-8.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bytes: Option<Vec<u8>>,
}

impl ConcatPart {
    fn new(ids: IdSet, payload: &[u8]) -> Self {
        match std::str::from_utf8(payload) {
            Ok(t) => Self {
                ids,
                text: Some(t.to_owned()),
                bytes: None,
            },
            Err(_) => Self {
                ids,
                text: None,
                bytes: Some(payload.to_vec()),
            },
        }
    }

    /// The payload bytes.
    pub fn payload(&self) -> &[u8] {
        match (&self.text, &self.bytes) {
            (Some(t), _) => t.as_bytes(),
            (None, Some(b)) => b,
            (None, None) => &[],
        }
    }
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct ConcatRecord {
    parts: Vec<ConcatPart>,
}

/// Concatenation in id order.
#[derive(Debug, Default)]
pub struct Concat {
    parts: Vec<ConcatPart>,
}

impl Concat {
    /// An empty concatenation.
    pub fn new() -> Self {
        Self::default()
    }

    fn take_sorted(&mut self) -> (Vec<ConcatPart>, IdSet) {
        let mut parts = std::mem::take(&mut self.parts);
        parts.sort_by(|a, b| (a.ids.first(), a.payload()).cmp(&(b.ids.first(), b.payload())));
        let mut all = IdSet::new();
        for p in &parts {
            all.union_with(&p.ids);
        }
        (parts, all)
    }
}

impl Filter for Concat {
    fn name(&self) -> &str {
        "concat"
    }

    fn fold(&mut self, payload: &[u8], sources: &IdSet) -> Result<(), FilterError> {
        if record::is_record(payload) {
            let r: ConcatRecord = record::decode("concat", "concat", payload, sources)?;
            self.parts.extend(r.parts);
        } else {
            self.parts.push(ConcatPart::new(sources.clone(), payload));
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<Vec<Group>, FilterError> {
        if self.parts.is_empty() {
            return Ok(Vec::new());
        }
        let (parts, all) = self.take_sorted();
        Ok(vec![Group::new(
            record::encode("concat", &ConcatRecord { parts }),
            all,
        )])
    }

    fn finish(&mut self) -> Result<Vec<Group>, FilterError> {
        if self.parts.is_empty() {
            return Ok(Vec::new());
        }
        let (parts, all) = self.take_sorted();
        let mut out = BytesMut::new();
        for p in &parts {
            out.extend_from_slice(p.payload());
        }
        Ok(vec![Group::new(Bytes::from(out), all)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interleaved_subtrees() {
        let mut a = Concat::new();
        a.fold(b"a", &IdSet::single(0)).unwrap();
        a.fold(b"c", &IdSet::single(2)).unwrap();
        let mut b = Concat::new();
        b.fold(&[0xff], &IdSet::single(3)).unwrap();
        b.fold(b"b", &IdSet::single(1)).unwrap();
        let mut root = Concat::new();
        for g in a.flush().unwrap().into_iter().chain(b.flush().unwrap()) {
            root.fold(&g.payload, &g.sources).unwrap();
        }
        let g = root.finish().unwrap();
        assert_eq!(&g[0].payload[..], b"abc\xff");
        assert_eq!(g[0].sources.to_string(), "[0-3]");
    }
}
