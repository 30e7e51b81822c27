//! Splits a line into its template key (the text with its numbers replaced by slots) and
//! the numbers' texts.
//!
//! Numbers are decimal integers and decimals (`12`, `0.91`, `-3`: a sign belongs to the
//! number unless it is glued to a word, as in `x-1`), with an exponent (`1.5e-3`); hex
//! ids (the digits after `0x`, and whole words of at least [`HEX_WORD`] hex digits holding
//! a digit and a letter, `7f3a9c01`); and digit runs inside words and paths
//! (`/tmp/rank12/out.3` is `/tmp/rank{}/out.{}`). A line with more than [`MAX_SLOTS`]
//! numbers (a row of a matrix, a hex dump) stays an exact line.

use super::{Key, MAX_SLOTS, SlotKind};

/// The shortest word of hex digits taken as an id (shorter ones, `cafe1`, stay text).
pub const HEX_WORD: usize = 8;

fn is_word(c: u8) -> bool {
    c.is_ascii_alphanumeric()
}

/// The end of the decimal number starting at `i` (at a digit, or a sign before one).
fn decimal_end(t: &[u8], mut i: usize) -> usize {
    if matches!(t[i], b'+' | b'-') {
        i += 1;
    }
    let digits = |t: &[u8], mut i: usize| {
        while i < t.len() && t[i].is_ascii_digit() {
            i += 1;
        }
        i
    };
    i = digits(t, i);
    if i + 1 < t.len() && t[i] == b'.' && t[i + 1].is_ascii_digit() {
        i = digits(t, i + 1);
    }
    if i < t.len() && matches!(t[i], b'e' | b'E') {
        let mut j = i + 1;
        if j < t.len() && matches!(t[j], b'+' | b'-') {
            j += 1;
        }
        if j < t.len() && t[j].is_ascii_digit() {
            i = digits(t, j);
        }
    }
    i
}

/// The number starting at `i`, if one does: its kind, where its text starts (after a `0x`)
/// and where it ends.
fn number_at(t: &[u8], i: usize) -> Option<(SlotKind, usize, usize)> {
    let word_start = i == 0 || !is_word(t[i - 1]);
    let c = t[i];
    if word_start && c == b'0' && matches!(t.get(i + 1), Some(b'x' | b'X')) {
        let from = i + 2;
        let end = from
            + t[from..]
                .iter()
                .take_while(|b| b.is_ascii_hexdigit())
                .count();
        if end > from {
            return Some((SlotKind::Hex, from, end));
        }
    }
    if word_start && c.is_ascii_alphanumeric() {
        let end = i + t[i..].iter().take_while(|&&b| is_word(b)).count();
        let w = &t[i..end];
        if w.len() >= HEX_WORD
            && w.iter().all(u8::is_ascii_hexdigit)
            && w.iter().any(u8::is_ascii_digit)
            && w.iter().any(u8::is_ascii_alphabetic)
        {
            return Some((SlotKind::Hex, i, end));
        }
    }
    let signed =
        matches!(c, b'+' | b'-') && word_start && t.get(i + 1).is_some_and(u8::is_ascii_digit);
    if c.is_ascii_digit() || signed {
        return Some((SlotKind::Dec, i, decimal_end(t, i)));
    }
    None
}

/// The template key of `text` and its numbers, or `None` if it holds none or more than
/// [`MAX_SLOTS`] (or is not UTF-8): such a line is exact.
pub fn scan(text: &[u8]) -> Option<(Key, Vec<Box<str>>)> {
    let s = std::str::from_utf8(text).ok()?;
    let t = s.as_bytes();
    let mut segs = Vec::new();
    let mut kinds = Vec::new();
    let mut values = Vec::new();
    let mut lit_start = 0;
    let mut i = 0;
    while i < t.len() {
        match number_at(t, i) {
            Some((kind, from, end)) => {
                // (Numbers are ASCII: these are char boundaries.)
                segs.push(s[lit_start..from].into());
                kinds.push(kind);
                values.push(s[from..end].into());
                lit_start = end;
                i = end;
            }
            None => i += 1,
        }
    }
    if values.is_empty() || values.len() > MAX_SLOTS {
        return None;
    }
    segs.push(s[lit_start..].into());
    Some((Key { segs, kinds }, values))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(text: &str) -> Option<(String, Vec<String>)> {
        let (k, v) = scan(text.as_bytes())?;
        Some((k.pattern(), v.iter().map(|s| s.to_string()).collect()))
    }

    #[test]
    fn numbers_become_slots() {
        let (k, v) = shown("step 5 took 0.91 s").unwrap();
        assert_eq!(k, "step {} took {} s");
        assert_eq!(v, ["5", "0.91"]);
        assert_eq!(
            shown("/tmp/rank12/out.3").unwrap(),
            ("/tmp/rank{}/out.{}".into(), vec!["12".into(), "3".into()])
        );
        assert_eq!(shown("t -0.5e-3, x-1").unwrap().1, ["-0.5e-3", "1"]);
        assert_eq!(
            shown("at 0x7f3a00 id deadbeef01 cafe1").unwrap().1,
            ["7f3a00", "deadbeef01", "1"]
        );
        assert_eq!(shown("at 0x7f3a00").unwrap().0, "at 0x{}");
        assert_eq!(shown("2026-11-29").unwrap().1, ["2026", "11", "29"]);
        assert_eq!(shown("12345678").unwrap().0, "{}");
        assert_eq!(shown("1e ms 3ms").unwrap().1, ["1", "3"]);
    }

    #[test]
    fn text_without_numbers_is_exact() {
        assert!(shown("hello world").is_none());
        assert!(shown("").is_none());
        assert!(scan(b"\xff 12").is_none());
        let row = |n: usize| (0..n).map(|i| i.to_string()).collect::<Vec<_>>().join(" ");
        assert!(shown(&row(MAX_SLOTS)).is_some());
        assert!(shown(&row(MAX_SLOTS + 1)).is_none());
    }
}
