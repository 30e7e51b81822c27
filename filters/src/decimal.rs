//! [`Decimal`]: an exact fixed-point number (128-bit mantissa, up to 18 fraction digits), the
//! scalar type of every numeric filter. Addition is exact, so sums do not depend on order.
//!
//! Text form (the scalar payload encoding, version 1): optional ASCII whitespace, an optional
//! sign, digits with an optional `.` fraction and an optional `e`/`E` exponent (`42`,
//! `-0.25`, `1.5e3`). Inputs with more than 18 fraction digits are rounded half-to-even once,
//! when read. Output is canonical: no exponent, no trailing fraction zeros, no `-0` (`1500`,
//! `0.25`).

use std::cmp::Ordering;
use std::fmt;
use std::str::FromStr;

use bytes::Bytes;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Most fraction digits a [`Decimal`] keeps.
pub const MAX_SCALE: u32 = 18;

/// An exact decimal number `mantissa / 10^scale`, kept canonical (no trailing fraction zeros),
/// so equal values have equal representations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Decimal {
    mant: i128,
    scale: u32,
}

/// Why text is not a [`Decimal`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecimalError {
    /// Not of the form `-12.5e3`.
    #[error("is not a decimal number")]
    Syntax,
    /// Too many digits or too large an exponent for a 128-bit mantissa.
    #[error("is out of the exact decimal range (about ±1.7e38 / 10^fraction digits)")]
    Range,
}

fn pow10(n: u32) -> Option<i128> {
    10i128.checked_pow(n)
}

impl Decimal {
    /// Zero.
    pub const ZERO: Decimal = Decimal { mant: 0, scale: 0 };

    /// `mant / 10^scale`, canonicalized; `None` if `scale` exceeds [`MAX_SCALE`].
    pub fn new(mant: i128, scale: u32) -> Option<Self> {
        (scale <= MAX_SCALE).then(|| Self { mant, scale }.canonical())
    }

    /// The integer `v`.
    pub fn from_int(v: i128) -> Self {
        Self { mant: v, scale: 0 }
    }

    /// The mantissa (value = mantissa / 10^scale).
    pub fn mantissa(self) -> i128 {
        self.mant
    }

    /// Number of fraction digits.
    pub fn scale(self) -> u32 {
        self.scale
    }

    /// The value if it is an integer.
    pub fn as_int(self) -> Option<i128> {
        (self.scale == 0).then_some(self.mant)
    }

    fn canonical(mut self) -> Self {
        // An integer is canonical as it is. Said first: the compiler would otherwise
        // compute the 128-bit `% 10` below (a library call) before looking at the scale.
        if self.scale == 0 {
            return self;
        }
        if self.mant == 0 {
            self.scale = 0;
        }
        while self.scale > 0 && self.mant % 10 == 0 {
            self.mant /= 10;
            self.scale -= 1;
        }
        self
    }

    /// The mantissa at a larger scale `s`.
    fn mant_at(self, s: u32) -> Option<i128> {
        self.mant.checked_mul(pow10(s - self.scale)?)
    }

    /// Exact sum, `None` on overflow.
    pub fn checked_add(self, other: Decimal) -> Option<Decimal> {
        if self.scale == other.scale {
            // The same scale (all integers): no rescaling, so no 128-bit multiplications,
            // which are library calls.
            let m = self.mant.checked_add(other.mant)?;
            return Some(
                Decimal {
                    mant: m,
                    scale: self.scale,
                }
                .canonical(),
            );
        }
        let s = self.scale.max(other.scale);
        let m = self.mant_at(s)?.checked_add(other.mant_at(s)?)?;
        Some(Decimal { mant: m, scale: s }.canonical())
    }

    /// Exact difference, `None` on overflow.
    pub fn checked_sub(self, other: Decimal) -> Option<Decimal> {
        self.checked_add(Decimal {
            mant: other.mant.checked_neg()?,
            scale: other.scale,
        })
    }

    /// Exact product with an integer, `None` on overflow.
    pub fn checked_mul_int(self, k: i128) -> Option<Decimal> {
        Some(
            Decimal {
                mant: self.mant.checked_mul(k)?,
                scale: self.scale,
            }
            .canonical(),
        )
    }

    /// `self / k` rounded half-to-even to as many fraction digits (up to [`MAX_SCALE`]) as
    /// fit; deterministic. `None` if `k` is zero.
    pub fn div_int(self, k: u64) -> Option<Decimal> {
        if k == 0 {
            return None;
        }
        let k = i128::from(k);
        let neg = self.mant < 0;
        // Work on the magnitude; i128::MIN has no positive counterpart, so drop one digit.
        let (mut mag, mut scale) = match self.mant.checked_abs() {
            Some(m) => (m, self.scale),
            None => (self.mant / 10, self.scale.saturating_sub(1)),
        };
        let mut q = mag / k;
        mag %= k;
        while scale < MAX_SCALE && mag != 0 {
            let Some(q10) = q.checked_mul(10) else { break };
            let r10 = mag * 10; // mag < k <= u64::MAX: no overflow
            q = q10 + r10 / k;
            mag = r10 % k;
            scale += 1;
        }
        // Round half to even on what is left.
        let twice = mag * 2;
        if twice > k || (twice == k && q % 2 == 1) {
            q += 1;
        }
        let mant = if neg { -q } else { q };
        Some(Decimal { mant, scale }.canonical())
    }

    /// Whether the value is below zero.
    pub fn is_negative(self) -> bool {
        self.mant < 0
    }
}

impl Ord for Decimal {
    fn cmp(&self, other: &Self) -> Ordering {
        // Integer parts first (no overflow), then fractions at MAX_SCALE (< 10^36).
        let (ai, af) = split(*self);
        let (bi, bf) = split(*other);
        ai.cmp(&bi).then(af.cmp(&bf))
    }
}

impl PartialOrd for Decimal {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Floor integer part and the non-negative fraction scaled to [`MAX_SCALE`] digits.
fn split(d: Decimal) -> (i128, i128) {
    let p = pow10(d.scale).expect("scale <= 18");
    let (i, f) = (d.mant.div_euclid(p), d.mant.rem_euclid(p));
    (i, f * pow10(MAX_SCALE - d.scale).expect("scale <= 18"))
}

impl fmt::Display for Decimal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.scale == 0 {
            // A plain integer with no width, precision or `+` asked for (every filter's
            // output): its digits straight from a stack buffer.
            if f.width().is_none()
                && f.precision().is_none()
                && !f.sign_plus()
                && let Some(text) = self.small_int_text(&mut [0; 20])
            {
                return f.write_str(std::str::from_utf8(text).expect("ASCII digits"));
            }
            // 64-bit formatting where it fits (128-bit division is a library call per
            // digit), with the formatter's width, fill and sign.
            return match i64::try_from(self.mant) {
                Ok(v) => fmt::Display::fmt(&v, f),
                Err(_) => fmt::Display::fmt(&self.mant, f),
            };
        }
        let mag = self.mant.unsigned_abs();
        let p = 10u128.pow(self.scale);
        let sign = if self.mant < 0 { "-" } else { "" };
        write!(
            f,
            "{sign}{}.{:0width$}",
            mag / p,
            mag % p,
            width = self.scale as usize
        )
    }
}

impl FromStr for Decimal {
    type Err = DecimalError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Decimal::parse(s.as_bytes())
    }
}

/// The value of `digits` if they are 1 to 18 ASCII digits (so it fits an `i64`): the plain
/// integers [`Decimal::parse`] reads without its general path.
#[inline]
fn digits_value(digits: &[u8]) -> Option<i64> {
    if digits.is_empty() || digits.len() > 18 {
        return None;
    }
    let mut m = 0i64;
    for &c in digits {
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        m = m * 10 + i64::from(d);
    }
    Some(m)
}

impl Decimal {
    /// The text form as bytes (what [`fmt::Display`] writes): a filter's flushed payload.
    pub fn to_bytes(&self) -> Bytes {
        match self.small_int_text(&mut [0; 20]) {
            Some(text) => Bytes::copy_from_slice(text),
            None => Bytes::from(self.to_string()),
        }
    }

    /// `text` if it is only an optional `-` and 1 to 18 digits; `None` for anything else
    /// (which the general path of [`parse`](Decimal::parse) reads, to the same value where
    /// this reads one).
    #[inline]
    fn plain_int(text: &[u8]) -> Option<i64> {
        match text {
            [b'-', digits @ ..] => digits_value(digits).map(|m| -m),
            _ => digits_value(text),
        }
    }

    /// An integer that fits 64 bits, as text in the end of `buf`: `-` and digits.
    fn small_int_text<'a>(&self, buf: &'a mut [u8; 20]) -> Option<&'a [u8]> {
        if self.scale != 0 {
            return None;
        }
        let v = i64::try_from(self.mant).ok()?;
        let mut at = buf.len();
        let mut m = v.unsigned_abs();
        loop {
            at -= 1;
            buf[at] = b'0' + (m % 10) as u8;
            m /= 10;
            if m == 0 {
                break;
            }
        }
        if v < 0 {
            at -= 1;
            buf[at] = b'-';
        }
        Some(&buf[at..])
    }

    /// Reads the text form (see the module docs).
    pub fn parse(text: &[u8]) -> Result<Self, DecimalError> {
        // The text of most values (counters, ids, a child's sum): one pass over it.
        if let Some(m) = Self::plain_int(text) {
            return Ok(Decimal {
                mant: i128::from(m),
                scale: 0,
            });
        }
        let t = text.trim_ascii();
        let (neg, t) = match t.first() {
            Some(b'-') => (true, &t[1..]),
            Some(b'+') => (false, &t[1..]),
            _ => (false, t),
        };
        // A plain integer of up to 18 digits with spaces around it or a `+` (the bare
        // form went through `plain_int` above): no exponent, no fraction, nothing to
        // round; the general path below gives the same value.
        if let Some(m) = digits_value(t) {
            let m = i128::from(m);
            return Ok(Decimal {
                mant: if neg { -m } else { m },
                scale: 0,
            });
        }
        let (int, frac, exp) = Self::parts(t)?;
        // Digits of the mantissa, leading zeros dropped; the number is digits * 10^-scale.
        let all = int.iter().chain(frac).skip_while(|&&c| c == b'0');
        let digits: Vec<u8> = all.copied().collect();
        let (mut mant, scale) = Self::rounded(&digits, frac.len() as i64 - exp)?;
        if neg {
            mant = -mant;
        }
        Ok(Decimal { mant, scale }.canonical())
    }

    /// Splits unsigned number text into its integer digits, fraction digits and exponent;
    /// anything but digits, one `.` and one exponent is a syntax error.
    fn parts(t: &[u8]) -> Result<(&[u8], &[u8], i64), DecimalError> {
        let (num, exp) = match t.iter().position(|&c| c == b'e' || c == b'E') {
            Some(i) => (&t[..i], Some(&t[i + 1..])),
            None => (t, None),
        };
        let (int, frac) = match num.iter().position(|&c| c == b'.') {
            Some(i) => (&num[..i], &num[i + 1..]),
            None => (num, &num[..0]),
        };
        if int.is_empty() && frac.is_empty() {
            return Err(DecimalError::Syntax);
        }
        if !int.iter().chain(frac).all(u8::is_ascii_digit) {
            return Err(DecimalError::Syntax);
        }
        let exp = match exp {
            None => 0,
            Some(e) => Self::exponent(e)?,
        };
        Ok((int, frac, exp))
    }

    /// The exponent after `e`: an optional sign and one to six digits.
    fn exponent(e: &[u8]) -> Result<i64, DecimalError> {
        let digits = e.strip_prefix(b"-").or(e.strip_prefix(b"+")).unwrap_or(e);
        if digits.is_empty() || digits.len() > 6 || !digits.iter().all(u8::is_ascii_digit) {
            return Err(DecimalError::Syntax);
        }
        let v: i64 = std::str::from_utf8(digits)
            .map_err(|_| DecimalError::Syntax)?
            .parse()
            .map_err(|_| DecimalError::Syntax)?;
        Ok(if e.first() == Some(&b'-') { -v } else { v })
    }

    /// The mantissa and scale of `digits * 10^-scale`: at most MAX_SCALE fraction digits
    /// kept, the rest rounding half to even; a negative scale multiplied out.
    fn rounded(digits: &[u8], mut scale: i64) -> Result<(i128, u32), DecimalError> {
        let mut digits = digits;
        let keep = if scale > i64::from(MAX_SCALE) {
            let drop = usize::try_from(scale - i64::from(MAX_SCALE)).unwrap_or(usize::MAX);
            scale = i64::from(MAX_SCALE);
            if drop > digits.len() {
                // Every kept digit is zero and so is the first dropped one: rounds to 0.
                digits = &[];
            }
            digits.len().saturating_sub(drop)
        } else {
            digits.len()
        };
        let mut mant: i128 = 0;
        for &c in &digits[..keep] {
            mant = mant
                .checked_mul(10)
                .and_then(|m| m.checked_add(i128::from(c - b'0')))
                .ok_or(DecimalError::Range)?;
        }
        let rest = &digits[keep..];
        if let Some((&first, tail)) = rest.split_first() {
            let above_half = first > b'5' || (first == b'5' && tail.iter().any(|&c| c != b'0'));
            let half = first == b'5' && tail.iter().all(|&c| c == b'0');
            if above_half || (half && mant % 2 == 1) {
                mant = mant.checked_add(1).ok_or(DecimalError::Range)?;
            }
        }
        if scale < 0 {
            let up = u32::try_from(-scale).map_err(|_| DecimalError::Range)?;
            mant = if mant == 0 {
                0
            } else {
                pow10(up)
                    .and_then(|p| mant.checked_mul(p))
                    .ok_or(DecimalError::Range)?
            };
            scale = 0;
        }
        Ok((mant, scale as u32))
    }
}

impl Serialize for Decimal {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Decimal {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse()
            .map_err(|e| serde::de::Error::custom(format!("{s:?} {e}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn d(s: &str) -> Decimal {
        s.parse().unwrap()
    }

    #[test]
    fn text_form() {
        for (i, o) in [
            ("42", "42"),
            (" 42\n", "42"),
            ("-0.250", "-0.25"),
            ("1.5e3", "1500"),
            ("+7", "7"),
            ("-0", "0"),
            ("2.0", "2"),
            ("1e-3", "0.001"),
            ("5e-20", "0"),
            ("5e-19", "0"),
            ("6e-19", "0.000000000000000001"),
            (".5", "0.5"),
            ("5.", "5"),
            ("0.1234567890123456785", "0.123456789012345678"),
            ("0.1234567890123456775", "0.123456789012345678"),
            ("0.12345678901234567851", "0.123456789012345679"),
        ] {
            assert_eq!(d(i).to_string(), o, "{i}");
        }
        for bad in [
            "", "-", "abc", "1.2.3", "1e", "0x10", "1 2", "nan", "inf", ".",
        ] {
            assert_eq!(bad.parse::<Decimal>(), Err(DecimalError::Syntax), "{bad}");
        }
        assert_eq!("1e300".parse::<Decimal>(), Err(DecimalError::Range));
    }

    #[test]
    fn mean_rounding() {
        assert_eq!(
            d("1").div_int(3).unwrap().to_string(),
            "0.333333333333333333"
        );
        assert_eq!(
            d("2").div_int(3).unwrap().to_string(),
            "0.666666666666666667"
        );
        assert_eq!(d("-7").div_int(2).unwrap().to_string(), "-3.5");
        assert_eq!(d("10").div_int(4).unwrap().to_string(), "2.5");
        assert!(d("1").div_int(0).is_none());
    }

    proptest! {
        /// Plain integers (the fast path) read as the general path reads them with a
        /// fraction or an exponent added, whitespace and signs included.
        #[test]
        fn plain_integers_read_as_the_general_path_reads_them(
            digits in "[0-9]{1,20}",
            sign in prop::sample::select(vec!["", "-", "+"]),
            pad in prop::sample::select(vec!["", " ", "\t\n"]),
        ) {
            let plain = format!("{pad}{sign}{digits}{pad}");
            let general = format!("{sign}{digits}.0");
            let exp = format!("{sign}{digits}e0");
            prop_assert_eq!(Decimal::parse(plain.as_bytes()), Decimal::parse(general.as_bytes()));
            prop_assert_eq!(Decimal::parse(plain.as_bytes()), Decimal::parse(exp.as_bytes()));
        }

        /// Integers print as 64-bit and 128-bit formatting print them.
        #[test]
        fn integers_print_as_i128_prints_them(
            m in prop_oneof![
                any::<i64>().prop_map(i128::from),
                any::<i128>(),
                Just(i128::from(i64::MIN)),
                Just(0),
            ],
        ) {
            prop_assert_eq!(Decimal::from_int(m).to_string(), m.to_string());
            prop_assert_eq!(Decimal::from_int(m).to_bytes(), m.to_string().into_bytes());
            // Asked for a width or a sign, an integer gets them as an integer would.
            prop_assert_eq!(format!("{:>42}", Decimal::from_int(m)), format!("{m:>42}"));
            prop_assert_eq!(format!("{:+}", Decimal::from_int(m)), format!("{m:+}"));
        }

        #[test]
        fn text_round_trip(m in any::<i64>(), s in 0u32..=18) {
            let x = Decimal::new(i128::from(m), s).unwrap();
            prop_assert_eq!(d(&x.to_string()), x);
            prop_assert_eq!(x.to_bytes(), x.to_string().into_bytes());
        }

        #[test]
        fn order_matches_integers(a in any::<i64>(), b in any::<i64>(), s in 0u32..=18, t in 0u32..=18) {
            let x = Decimal::new(i128::from(a), s).unwrap();
            let y = Decimal::new(i128::from(b), t).unwrap();
            // Compare a/10^s with b/10^t exactly through cross-multiplication.
            let l = i128::from(a) * 10i128.pow(18 - s);
            let r = i128::from(b) * 10i128.pow(18 - t);
            prop_assert_eq!(x.cmp(&y), l.cmp(&r));
            prop_assert_eq!(x.checked_add(y).unwrap().checked_sub(y).unwrap(), x);
            // The sum is exact at either scale, the same or not.
            prop_assert_eq!(x.checked_add(y), Decimal::new(l + r, 18));
            let z = Decimal::new(i128::from(b), s).unwrap();
            prop_assert_eq!(
                x.checked_add(z),
                Decimal::new(i128::from(a) + i128::from(b), s)
            );
        }
    }
}
