//! A slot's values: their order (exact for hex ids, by value then text for decimals) and
//! an exact sum (for the mean) that does not depend on the order values are added in.

use std::cmp::Ordering;
use std::hash::{Hash, Hasher};

use super::SlotKind;

/// A slot's value in a row: its text as printed and its number, parsed once (rows are
/// compared many times when a group keeps its extreme rows).
#[derive(Debug, Clone)]
pub struct Value {
    /// The text as printed.
    pub text: Box<str>,
    /// Its number (a hex value's may be rounded: ties are settled by the text).
    num: f64,
}

impl Value {
    /// A value of a slot of kind `kind`.
    pub fn new(kind: SlotKind, text: Box<str>) -> Value {
        let num = match kind {
            SlotKind::Dec => decimal(&text),
            // (Rounding is monotonic: a lower float is a lower value.)
            SlotKind::Hex => hex_digits(&text).chars().fold(0.0, |n, c| {
                n * 16.0 + f64::from(c.to_digit(16).unwrap_or(0))
            }),
        };
        Value { text, num }
    }

    /// Orders two values of one slot of kind `kind`, as [`cmp`] does.
    pub(super) fn cmp(&self, kind: SlotKind, o: &Value) -> Ordering {
        match self.num.total_cmp(&o.num) {
            Ordering::Equal if kind == SlotKind::Dec => self.text.cmp(&o.text),
            Ordering::Equal => cmp(kind, &self.text, &o.text),
            ne => ne,
        }
    }

    /// The value as a float.
    pub(super) fn num(&self) -> f64 {
        self.num
    }
}

// A slot's number follows from its text: values are equal when their texts are.
impl PartialEq for Value {
    fn eq(&self, o: &Value) -> bool {
        self.text == o.text
    }
}

impl Eq for Value {}

impl Hash for Value {
    fn hash<H: Hasher>(&self, h: &mut H) {
        self.text.hash(h);
    }
}

/// Orders two values of a slot of kind `kind`: by number, then by text (so `1.0` and
/// `1.00` are distinct values and the order is total).
pub(super) fn cmp(kind: SlotKind, a: &str, b: &str) -> Ordering {
    match kind {
        SlotKind::Dec => decimal(a).total_cmp(&decimal(b)).then_with(|| a.cmp(b)),
        SlotKind::Hex => {
            let (x, y) = (hex_digits(a), hex_digits(b));
            x.len()
                .cmp(&y.len())
                .then_with(|| {
                    (x.bytes().map(|c| c.to_ascii_lowercase()))
                        .cmp(y.bytes().map(|c| c.to_ascii_lowercase()))
                })
                .then_with(|| a.cmp(b))
        }
    }
}

/// A decimal value as a float (for ordering and the inexact mean).
pub(super) fn decimal(t: &str) -> f64 {
    t.parse().unwrap_or(0.0)
}

fn hex_digits(t: &str) -> &str {
    let d = t.trim_start_matches('0');
    if d.is_empty() { "0" } else { d }
}

/// Digits after the decimal point of a value's text (its precision).
pub(super) fn fraction_digits(t: &str) -> u8 {
    let mant = t.split(['e', 'E']).next().unwrap_or(t);
    mant.split_once('.')
        .map_or(0, |(_, f)| f.len().min(usize::from(u8::MAX)) as u8)
}

/// Whether a value's text has an exponent.
pub(super) fn has_exponent(t: &str) -> bool {
    t.contains(['e', 'E'])
}

/// The largest scale (digits after the point) an exact sum keeps.
const MAX_SCALE: u32 = 36;

/// A sum of decimal values: exact (`mant / 10^scale`) while it fits, else a float.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Sum {
    /// Exactly `mant / 10^scale`.
    Exact {
        /// The digits.
        mant: i128,
        /// Digits after the point.
        scale: u32,
    },
    /// A float (a value or a sum too large or too precise to hold exactly).
    Float(f64),
}

impl Default for Sum {
    fn default() -> Self {
        Sum::Exact { mant: 0, scale: 0 }
    }
}

fn pow10(n: u32) -> Option<i128> {
    10i128.checked_pow(n)
}

impl Sum {
    /// The value of a decimal's text.
    pub fn of(t: &str) -> Sum {
        Self::exact(t).unwrap_or_else(|| Sum::Float(decimal(t)))
    }

    fn exact(t: &str) -> Option<Sum> {
        let (mant, exp) = match t.find(['e', 'E']) {
            Some(i) => (&t[..i], t[i + 1..].parse::<i32>().ok()?),
            None => (t, 0),
        };
        let (neg, mant) = match mant.as_bytes().first() {
            Some(b'-') => (true, &mant[1..]),
            Some(b'+') => (false, &mant[1..]),
            _ => (false, mant),
        };
        let (int, frac) = mant.split_once('.').unwrap_or((mant, ""));
        let mut m: i128 = 0;
        for c in int.bytes().chain(frac.bytes()) {
            m = m
                .checked_mul(10)?
                .checked_add(i128::from(c.checked_sub(b'0')?))?;
        }
        let scale = i64::try_from(frac.len()).ok()? - i64::from(exp);
        let (m, scale) = if scale < 0 {
            (m.checked_mul(pow10(u32::try_from(-scale).ok()?)?)?, 0)
        } else {
            (m, u32::try_from(scale).ok().filter(|&s| s <= MAX_SCALE)?)
        };
        Some(Sum::Exact {
            mant: if neg { -m } else { m },
            scale,
        })
    }

    /// The sum as a float.
    pub fn to_f64(self) -> f64 {
        match self {
            Sum::Exact { mant, scale } => mant as f64 / 10f64.powi(scale as i32),
            Sum::Float(f) => f,
        }
    }

    fn rescaled(self, to: u32) -> Option<i128> {
        match self {
            Sum::Exact { mant, scale } => mant.checked_mul(pow10(to.checked_sub(scale)?)?),
            Sum::Float(_) => None,
        }
    }

    fn scale(self) -> u32 {
        match self {
            Sum::Exact { scale, .. } => scale,
            Sum::Float(_) => 0,
        }
    }

    /// `self + k * v`.
    pub fn add_times(self, v: Sum, k: i64) -> Sum {
        let scale = self.scale().max(v.scale());
        let exact = (|| {
            let a = self.rescaled(scale)?;
            let b = v.rescaled(scale)?.checked_mul(i128::from(k))?;
            Some(Sum::Exact {
                mant: a.checked_add(b)?,
                scale,
            })
        })();
        exact.unwrap_or_else(|| Sum::Float(self.to_f64() + v.to_f64() * k as f64))
    }
}

impl std::ops::Add for Sum {
    type Output = Sum;
    fn add(self, v: Sum) -> Sum {
        self.add_times(v, 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_are_exact() {
        let s = Sum::of("0.1") + Sum::of("0.2") + Sum::of("-1.5e-1");
        assert_eq!(s, Sum::Exact { mant: 15, scale: 2 });
        assert_eq!(
            Sum::of("12e2"),
            Sum::Exact {
                mant: 1200,
                scale: 0
            }
        );
        assert!(matches!(Sum::of("1e400"), Sum::Float(_)));
        assert_eq!(Sum::of("3").add_times(Sum::of("1"), -3), Sum::default());
    }

    #[test]
    fn order() {
        assert_eq!(cmp(SlotKind::Dec, "9", "10"), Ordering::Less);
        assert_eq!(cmp(SlotKind::Dec, "1.0", "1.00"), Ordering::Less);
        assert_eq!(cmp(SlotKind::Hex, "ff", "00100"), Ordering::Less);
        assert_eq!(cmp(SlotKind::Hex, "FF", "fe"), Ordering::Greater);
        assert_eq!(fraction_digits("1.250e3"), 3);
    }
}
