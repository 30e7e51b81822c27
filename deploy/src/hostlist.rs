//! Slurm's hostlist syntax, the form clusters name hosts in: `node[01-04,07],login1` is
//! node01, node02, node03, node04, node07 and login1. [`expand`] reads it (through the
//! hostlist-parser crate, with the whole input checked); [`compress`] writes a list of hosts
//! back in that form, as `scontrol show hostnames` / `hostlist -c` would.

use std::collections::BTreeMap;

/// A hostlist that could not be read; the message names the input and the position.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("hostlist {input:?}: {why}")]
pub struct HostlistError {
    input: String,
    why: String,
}

impl HostlistError {
    fn new(input: &str, why: impl Into<String>) -> Self {
        Self {
            input: input.to_owned(),
            why: why.into(),
        }
    }
}

/// The hosts of `list`, in order (`node[1-3]` is node1, node2, node3; zero padding kept).
pub fn expand(list: &str) -> Result<Vec<String>, HostlistError> {
    let list = list.trim();
    if list.is_empty() {
        return Err(HostlistError::new(list, "no host in it"));
    }
    // The parser stops quietly at what it cannot read: refuse anything outside the syntax
    // first, so `h1 h2` or `h[1-4]]` is an error instead of a shorter list.
    if let Some((i, c)) = list
        .char_indices()
        .find(|&(_, c)| !(c.is_ascii_alphanumeric() || "-._[],:".contains(c)))
    {
        return Err(HostlistError::new(
            list,
            format!("character {c:?} at position {i} is not part of a hostlist"),
        ));
    }
    let mut depth = 0i32;
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err(HostlistError::new(
                list,
                format!("unbalanced brackets at position {i}"),
            ));
        }
    }
    if depth != 0 {
        return Err(HostlistError::new(list, "a '[' is never closed"));
    }
    let hosts = hostlist_parser::parse(list).map_err(|e| {
        HostlistError::new(list, e.to_string().lines().collect::<Vec<_>>().join("; "))
    })?;
    if hosts.is_empty() {
        return Err(HostlistError::new(list, "no host in it"));
    }
    Ok(hosts)
}

/// Expands every item (each may itself be a hostlist with commas) into one list.
pub fn expand_all<S: AsRef<str>>(items: &[S]) -> Result<Vec<String>, HostlistError> {
    let mut out = Vec::new();
    for i in items {
        out.extend(expand(i.as_ref())?);
    }
    Ok(out)
}

/// `hosts` in hostlist form, each distinct host once: hosts that differ only in a trailing
/// number of the same width share a bracket (`node[01-04,07]`), in order of first
/// appearance of each prefix; the numbers within a bracket are sorted.
pub fn compress<S: AsRef<str>>(hosts: &[S]) -> String {
    // prefix -> (width, numbers); hosts without a trailing number stand alone.
    let mut order: Vec<(String, usize)> = Vec::new();
    let mut groups: BTreeMap<(String, usize), Vec<u64>> = BTreeMap::new();
    let mut plain: Vec<String> = Vec::new();
    for h in hosts {
        let h = h.as_ref();
        let digits = h.len() - h.trim_end_matches(|c: char| c.is_ascii_digit()).len();
        let (prefix, num) = h.split_at(h.len() - digits);
        match num.parse::<u64>() {
            Ok(n) if digits > 0 && digits <= 18 => {
                let key = (prefix.to_owned(), digits);
                if !groups.contains_key(&key) {
                    order.push(key.clone());
                }
                groups.entry(key).or_default().push(n);
            }
            _ => {
                if !plain.iter().any(|p| p == h) {
                    order.push((h.to_owned(), usize::MAX));
                    plain.push(h.to_owned());
                }
            }
        }
    }
    let mut parts = Vec::new();
    for (prefix, width) in order {
        if width == usize::MAX {
            parts.push(prefix);
            continue;
        }
        let mut nums = groups.remove(&(prefix.clone(), width)).unwrap_or_default();
        nums.sort_unstable();
        nums.dedup();
        let fmt = |n: u64| format!("{n:0width$}");
        if nums.len() == 1 {
            parts.push(format!("{prefix}{}", fmt(nums[0])));
            continue;
        }
        let mut ranges = Vec::new();
        let mut i = 0;
        while i < nums.len() {
            let mut j = i;
            while j + 1 < nums.len() && nums[j + 1] == nums[j] + 1 {
                j += 1;
            }
            ranges.push(if i == j {
                fmt(nums[i])
            } else {
                format!("{}-{}", fmt(nums[i]), fmt(nums[j]))
            });
            i = j + 1;
        }
        parts.push(format!("{prefix}[{}]", ranges.join(",")));
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn expands_slurm_hostlists_in_order() {
        assert_eq!(
            expand("node[01-04,07],login1").unwrap(),
            ["node01", "node02", "node03", "node04", "node07", "login1"]
        );
        assert_eq!(expand("h[1-4]").unwrap(), ["h1", "h2", "h3", "h4"]);
        assert_eq!(expand("a.b-c").unwrap(), ["a.b-c"]);
        assert_eq!(expand_all(&["h[1-2]", "x"]).unwrap(), ["h1", "h2", "x"]);
    }

    #[test]
    fn bad_hostlists_are_named() {
        for bad in ["", "h1 h2", "h[1-4]]", "h[1-4", "h[1-,2]", "h;1"] {
            let e = expand(bad).unwrap_err().to_string();
            assert!(e.starts_with("hostlist "), "{bad:?}: {e}");
        }
    }

    #[test]
    fn compresses_like_scontrol() {
        assert_eq!(
            compress(&["node01", "node02", "node03", "node04", "node07", "login1"]),
            "node[01-04,07],login1"
        );
        assert_eq!(compress(&["h3", "h1", "h2", "h1"]), "h[1-3]");
        assert_eq!(compress(&["vm"]), "vm");
        assert_eq!(compress(&["n9", "n10"]), "n9,n10");
        assert_eq!(compress::<&str>(&[]), "");
    }

    proptest! {
        #[test]
        fn compress_then_expand_gives_the_distinct_hosts(
            hosts in proptest::collection::vec((0u8..3, 0u64..40, 1usize..4), 1..30)
        ) {
            let names: Vec<String> = hosts
                .iter()
                .map(|&(p, n, w)| format!("{}{:0w$}", ["n", "gpu", "x-"][p as usize], n))
                .collect();
            let mut want = names.clone();
            want.sort();
            want.dedup();
            let mut got = expand(&compress(&names)).unwrap();
            got.sort();
            prop_assert_eq!(got, want);
        }
    }
}
