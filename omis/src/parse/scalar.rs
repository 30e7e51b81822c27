//! Scalars of OMIS text for the parser: numbers (C forms: `0x1F`, `-2e3`, `.5`, `inf`) and
//! strings with C escapes.

use super::{Parser, Result, is_ident};
use crate::ast::Value;

impl Parser<'_> {
    /// `inf`, `infinity` or `nan` (any case) under the cursor: its length.
    pub(super) fn special_float(&self) -> Option<usize> {
        let end = self.b[self.pos..]
            .iter()
            .position(|&c| !is_ident(c))
            .map_or(self.b.len(), |n| self.pos + n);
        let word = &self.src[self.pos..end];
        ["inf", "infinity", "nan"]
            .iter()
            .any(|w| word.eq_ignore_ascii_case(w))
            .then_some(word.len())
    }

    /// Refuses a number that runs into letters, digits of the wrong base or a stray `.`.
    pub(super) fn check_number_end(&self, start: usize) -> Result<()> {
        match self.peek() {
            Some(c) if is_ident(c) || c == b'.' => Err(self.err(
                self.pos,
                format!("unexpected '{}' in number {}", c as char, self.found(start)),
            )),
            _ => Ok(()),
        }
    }

    /// A signed integer (decimal or `0x` hex) or float.
    pub(super) fn number(&mut self) -> Result<Value> {
        let start = self.pos;
        let neg = self.peek() == Some(b'-');
        if matches!(self.peek(), Some(b'-' | b'+')) {
            self.pos += 1;
        }
        if let Some(len) = self.special_float() {
            let word = &self.src[self.pos..self.pos + len];
            self.pos += len;
            let x = if word.eq_ignore_ascii_case("nan") {
                f64::NAN
            } else if neg {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            };
            return Ok(Value::Float(x));
        }
        if self.peek() == Some(b'0') && matches!(self.peek_at(1), Some(b'x' | b'X')) {
            return self.hex_number(start, neg);
        }
        let float = self.decimal_number(start)?;
        self.check_number_end(start)?;
        let text = &self.src[start..self.pos];
        let text = text.strip_prefix('+').unwrap_or(text);
        if float {
            match text.parse::<f64>() {
                Ok(x) if x.is_finite() => Ok(Value::Float(x)),
                _ => Err(self.err(start, format!("float {text} is out of range for a double"))),
            }
        } else {
            text.parse::<i64>()
                .map(Value::Int)
                .map_err(|_| self.err(start, format!("integer {text} does not fit in 64 bits")))
        }
    }

    /// A hexadecimal integer, the cursor on its `0x`; `start`: where its sign began.
    fn hex_number(&mut self, start: usize, neg: bool) -> Result<Value> {
        self.pos += 2;
        let digits = self.pos;
        while self.peek().is_some_and(|c| c.is_ascii_hexdigit()) {
            self.pos += 1;
        }
        if digits == self.pos {
            return Err(self.err(
                start,
                format!(
                    "expected hex digits after '0x', found {}",
                    self.found(digits)
                ),
            ));
        }
        self.check_number_end(start)?;
        let magnitude = u128::from_str_radix(&self.src[digits..self.pos], 16).ok();
        let value = magnitude
            .and_then(|m| i128::try_from(m).ok())
            .map(|m| if neg { -m } else { m })
            .and_then(|v| i64::try_from(v).ok());
        value.map(Value::Int).ok_or_else(|| {
            self.err(
                start,
                format!(
                    "integer {} does not fit in 64 bits",
                    &self.src[start..self.pos]
                ),
            )
        })
    }

    /// Moves the cursor over a decimal number's digits, fraction and exponent; says whether
    /// it is a float (a `.` or an exponent). `start`: where its sign began.
    fn decimal_number(&mut self, start: usize) -> Result<bool> {
        let mut digits = 0;
        let mut float = false;
        while self.peek().is_some_and(|c| c.is_ascii_digit()) {
            self.pos += 1;
            digits += 1;
        }
        if self.peek() == Some(b'.') {
            float = true;
            self.pos += 1;
            while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                self.pos += 1;
                digits += 1;
            }
        }
        if digits == 0 {
            return Err(self.err(
                start,
                format!(
                    "expected a value (integer, float, string, list or $n), found {}",
                    self.found(start)
                ),
            ));
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            let e = self.pos;
            self.pos += 1;
            if matches!(self.peek(), Some(b'-' | b'+')) {
                self.pos += 1;
            }
            let exp_digits = self.pos;
            while self.peek().is_some_and(|c| c.is_ascii_digit()) {
                self.pos += 1;
            }
            if exp_digits == self.pos {
                return Err(self.err(
                    e,
                    format!("exponent of number {} has no digits", self.found(start)),
                ));
            }
            float = true;
        }
        Ok(float)
    }

    /// A quoted string with C escapes, the `"` under the cursor.
    pub(super) fn string(&mut self) -> Result<String> {
        let open = self.pos;
        self.pos += 1;
        let mut buf = Vec::new();
        loop {
            let Some(c) = self.peek() else {
                return Err(self.err(
                    open,
                    "unterminated string: no closing '\"' before the end of input",
                ));
            };
            match c {
                b'"' => {
                    self.pos += 1;
                    break;
                }
                b'\n' => {
                    return Err(self.err(
                        open,
                        "unterminated string: no closing '\"' before the end of the line \
                         (write \\n for a line break)",
                    ));
                }
                b'\\' => {
                    let esc = self.pos;
                    self.pos += 1;
                    buf.push(self.escape(open, esc)?);
                }
                _ => {
                    buf.push(c);
                    self.pos += 1;
                }
            }
        }
        String::from_utf8(buf).map_err(|_| {
            self.err(
                open,
                "string is not valid UTF-8 once its \\x and octal escapes are applied",
            )
        })
    }

    /// The escape after the `\` at `esc` (cursor just past it): the byte it stands for.
    fn escape(&mut self, open: usize, esc: usize) -> Result<u8> {
        let Some(c) = self.peek() else {
            return Err(self.err(
                open,
                "unterminated string: no closing '\"' before the end of input",
            ));
        };
        self.pos += 1;
        let byte = match c {
            b'n' => b'\n',
            b't' => b'\t',
            b'r' => b'\r',
            b'a' => 0x07,
            b'b' => 0x08,
            b'f' => 0x0c,
            b'v' => 0x0b,
            b'\\' | b'"' | b'\'' | b'?' => c,
            b'x' => {
                let start = self.pos;
                while self.pos < start + 2 && self.peek().is_some_and(|c| c.is_ascii_hexdigit()) {
                    self.pos += 1;
                }
                if start == self.pos {
                    return Err(self.err(esc, "escape '\\x' needs one or two hex digits"));
                }
                u8::from_str_radix(&self.src[start..self.pos], 16).unwrap_or(0)
            }
            b'0'..=b'7' => {
                let start = self.pos - 1;
                while self.pos < start + 3 && matches!(self.peek(), Some(b'0'..=b'7')) {
                    self.pos += 1;
                }
                let text = &self.src[start..self.pos];
                u8::from_str_radix(text, 8)
                    .map_err(|_| self.err(esc, format!("octal escape '\\{text}' is above \\377")))?
            }
            _ => {
                let shown = self.src[self.pos - 1..].chars().next().unwrap_or('?');
                return Err(self.err(esc, format!("unknown escape '\\{shown}' in string")));
            }
        };
        Ok(byte)
    }
}
