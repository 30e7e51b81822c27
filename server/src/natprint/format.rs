//! Values printed exactly as gdb's MI `-data-evaluate-expression` prints them with its
//! default settings: integers in decimal, floating point as `%g` (see `super::float`),
//! characters as `65 'A'`, `_Bool` as `true`, enums
//! by name, pointers in hex (`char *` with the string), arrays as `{1, 2, 3}` with
//! `<repeats N times>` for runs of more than 10 equal elements and `...` after 200,
//! character arrays as strings, structs as `{x = 1, y = {a = 2}}`.

use std::fmt::Write;

use super::debug::Debug;
use super::types::{Type, Value, mask};
use super::{NotNative, Process};

/// gdb's `print repeats`: runs longer than this print as one element `<repeats N times>`.
const REPEATS: u64 = 10;
/// gdb's `print elements`: at most this many elements (or characters) per array.
const ELEMENTS: u64 = 200;

impl Debug {
    /// Prints `v` (read from `p`) into `out`.
    pub(super) fn format(&self, v: &Value, p: &Process, out: &mut String) -> Result<(), NotNative> {
        let size = self.size_of(&v.ty)?;
        let bytes = p.read(v.addr, size)?;
        self.format_bytes(&v.ty, &bytes, p, out)
    }

    /// Prints a value of type `t` whose bytes are `b`.
    fn format_bytes(
        &self,
        t: &Type,
        b: &[u8],
        p: &Process,
        out: &mut String,
    ) -> Result<(), NotNative> {
        match t {
            Type::Int {
                size,
                signed,
                text,
                boolean,
            } => {
                let raw = bits(b, *size);
                if *boolean {
                    match raw {
                        0 => out.push_str("false"),
                        1 => out.push_str("true"),
                        _ => out.push_str(&integer(raw, *size, *signed)),
                    }
                } else {
                    out.push_str(&integer(raw, *size, *signed));
                    if *text {
                        out.push_str(" '");
                        escape(raw as u8, '\'', true, out)?;
                        out.push('\'');
                    }
                }
            }
            Type::Float { size } => {
                let raw = bits(b, *size);
                let text = if *size == 4 {
                    super::float::g(f64::from(f32::from_bits(raw as u32)), 9)
                } else {
                    super::float::g(f64::from_bits(raw), 17)
                };
                out.push_str(&text.ok_or(NotNative::Type)?);
            }
            Type::Enum {
                size,
                signed,
                values,
            } => {
                let raw = bits(b, *size);
                match values.iter().find(|(v, _)| *v == raw) {
                    Some((_, name)) => out.push_str(name),
                    // gdb prints flag enums as `(A | B)`: not done here.
                    None if flag_enum(values, *size, *signed) => return Err(NotNative::Type),
                    None => out.push_str(&integer(raw, *size, *signed)),
                }
            }
            Type::Pointer(target) => self.pointer(bits(b, 8), *target, p, out)?,
            Type::Struct { members, .. } => {
                if members.is_empty() {
                    out.push_str("{<No data fields>}");
                    return Ok(());
                }
                out.push('{');
                for (i, m) in members.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    let ty = self.resolve(m.ty)?;
                    let size = self.size_of(&ty)?;
                    let at = m.offset as usize;
                    let field = b.get(at..at + size as usize).ok_or(NotNative::Type)?;
                    let _ = write!(out, "{} = ", m.name);
                    self.format_bytes(&ty, field, p, out)?;
                }
                out.push('}');
            }
            Type::Array { elem, dims } => {
                let inner = if dims.len() > 1 {
                    Type::Array {
                        elem: *elem,
                        dims: dims[1..].to_vec(),
                    }
                } else {
                    self.resolve(*elem)?
                };
                if let Type::Int { text: true, .. } = inner {
                    return chars_array(b, out);
                }
                let size = self.size_of(&inner)? as usize;
                let elements: Vec<&[u8]> = b.chunks(size.max(1)).take(dims[0] as usize).collect();
                self.elements(&inner, &elements, p, out)?;
            }
        }
        Ok(())
    }

    /// The elements of an array, gdb's way (repeats, the element limit).
    fn elements(
        &self,
        t: &Type,
        elements: &[&[u8]],
        p: &Process,
        out: &mut String,
    ) -> Result<(), NotNative> {
        out.push('{');
        let (mut i, mut printed) = (0usize, 0u64);
        while i < elements.len() && printed < ELEMENTS {
            if i > 0 {
                out.push_str(", ");
            }
            let run = elements[i..]
                .iter()
                .take_while(|e| **e == elements[i])
                .count();
            self.format_bytes(t, elements[i], p, out)?;
            if run as u64 > REPEATS {
                let _ = write!(out, " <repeats {run} times>");
                i += run;
                printed += REPEATS;
            } else {
                i += 1;
                printed += 1;
            }
        }
        if i < elements.len() {
            out.push_str("...");
        }
        out.push('}');
        Ok(())
    }

    /// A data pointer: its address, and for a character pointer the string it points to.
    fn pointer(
        &self,
        addr: u64,
        target: Option<super::debug::DieRef>,
        p: &Process,
        out: &mut String,
    ) -> Result<(), NotNative> {
        if addr != 0 && p.in_file(addr) {
            // gdb names the symbol there (`0x4010 <a>`): not done here.
            return Err(NotNative::Type);
        }
        let _ = write!(out, "{addr:#x}");
        let text = match target {
            Some(t) => matches!(self.resolve(t)?, Type::Int { text: true, .. }),
            None => false,
        };
        if !text || addr == 0 {
            return Ok(());
        }
        // Up to the limit or the terminating NUL (a string longer than the limit, or
        // unreadable memory: gdb's forms).
        let mut s = Vec::new();
        for chunk in 0..(ELEMENTS / 8 + 1) {
            let bytes = p.read(addr + chunk * 8, 8)?;
            match bytes.iter().position(|c| *c == 0) {
                Some(n) => {
                    s.extend_from_slice(&bytes[..n]);
                    break;
                }
                None => s.extend_from_slice(&bytes),
            }
        }
        if s.len() as u64 > ELEMENTS {
            return Err(NotNative::Type);
        }
        out.push(' ');
        string(&s, out)
    }
}

/// The low `size` bytes of `b` as an integer.
fn bits(b: &[u8], size: u64) -> u64 {
    let mut w = [0u8; 8];
    let n = (size as usize).min(8).min(b.len());
    w[..n].copy_from_slice(&b[..n]);
    u64::from_le_bytes(w) & mask(size)
}

/// `raw` (`size` bytes) in decimal, signed or not.
fn integer(raw: u64, size: u64, signed: bool) -> String {
    if signed {
        let shift = 64 - size * 8;
        (((raw << shift) as i64) >> shift).to_string()
    } else {
        raw.to_string()
    }
}

/// Whether gdb treats the enumeration as flags: non-negative values with disjoint bits.
fn flag_enum(values: &[(u64, String)], size: u64, signed: bool) -> bool {
    let mut seen = 0u64;
    for (v, _) in values {
        if signed && integer(*v, size, true).starts_with('-') {
            return false;
        }
        if seen & v != 0 {
            return false;
        }
        seen |= v;
    }
    true
}

/// One character inside `quote` quotes, escaped as gdb escapes it. A lone byte beyond
/// ASCII is an octal escape (no character in UTF-8 or ASCII); in a string (`single`
/// false) gdb may join such bytes into characters of the host's set: not done here.
fn escape(c: u8, quote: char, single: bool, out: &mut String) -> Result<(), NotNative> {
    match c {
        7 => out.push_str("\\a"),
        8 => out.push_str("\\b"),
        9 => out.push_str("\\t"),
        10 => out.push_str("\\n"),
        11 => out.push_str("\\v"),
        12 => out.push_str("\\f"),
        13 => out.push_str("\\r"),
        b'\\' => out.push_str("\\\\"),
        c if c as char == quote => {
            out.push('\\');
            out.push(quote);
        }
        0x20..=0x7e => out.push(c as char),
        0x80.. if !single => return Err(NotNative::Type),
        c => {
            let _ = write!(out, "\\{c:03o}");
        }
    }
    Ok(())
}

/// A character array as gdb prints it: the whole array but a final NUL, as a string.
fn chars_array(b: &[u8], out: &mut String) -> Result<(), NotNative> {
    let mut s = b;
    if s.last() == Some(&0) {
        s = &s[..s.len() - 1];
    }
    // Past the limit, gdb's `...` rules: not done here.
    if s.len() as u64 > ELEMENTS {
        return Err(NotNative::Type);
    }
    string(s, out)
}

/// Characters as gdb prints a string: runs of more than 10 equal characters as
/// `'c' <repeats N times>`, the rest in double quotes, the pieces joined by `, `.
fn string(s: &[u8], out: &mut String) -> Result<(), NotNative> {
    if s.is_empty() {
        out.push_str("\"\"");
        return Ok(());
    }
    let mut i = 0;
    let mut quoted = false;
    while i < s.len() {
        let run = s[i..].iter().take_while(|c| **c == s[i]).count();
        if run as u64 > REPEATS {
            if quoted {
                out.push('"');
                quoted = false;
            }
            if i > 0 {
                out.push_str(", ");
            }
            out.push('\'');
            escape(s[i], '\'', false, out)?;
            let _ = write!(out, "' <repeats {run} times>");
        } else {
            if !quoted {
                if i > 0 {
                    out.push_str(", ");
                }
                out.push('"');
                quoted = true;
            }
            for _ in 0..run {
                escape(s[i], '"', false, out)?;
            }
        }
        i += run;
    }
    if quoted {
        out.push('"');
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(b: &[u8]) -> String {
        let mut out = String::new();
        chars_array(b, &mut out).unwrap();
        out
    }

    #[test]
    fn strings_as_gdb_prints_them() {
        // What gdb 13 printed for these arrays.
        assert_eq!(s(b"\x011\x7f\x1b'\\\0\0"), r#""\0011\177\033'\\\000""#);
        assert_eq!(s(&[0; 300][..200]), r#"'\000' <repeats 199 times>"#);
        let mut reps = b"aaaaaaaaaaaaaaab".to_vec();
        reps.resize(40, 0);
        assert_eq!(
            s(&reps),
            r#"'a' <repeats 15 times>, "b", '\000' <repeats 23 times>"#
        );
        assert_eq!(s(&[0]), r#""""#);
        assert_eq!(
            s(b"hello\0\0\0\0\0\0\0\0\0\0\0"),
            r#""hello\000\000\000\000\000\000\000\000\000\000""#
        );
        let mut out = String::new();
        escape(b'"', '"', false, &mut out).unwrap();
        escape(b'"', '\'', true, &mut out).unwrap();
        escape(b'\'', '\'', true, &mut out).unwrap();
        assert_eq!(out, r#"\""\'"#);
    }

    #[test]
    fn integers() {
        assert_eq!(integer(0xfd, 1, true), "-3");
        assert_eq!(integer(0xffff_ffff, 4, false), "4294967295");
        assert_eq!(integer(u64::MAX, 8, true), "-1");
    }
}
