//! Floating-point values as gdb prints them: C's `%g` with 9 significant digits for
//! `float` and 17 for `double` (`0.100000001`, `3.1400000000000001`, `1e+17`), `inf` and
//! `-inf`; NaNs (gdb shows their payload) are not done here.

/// `v` as C's `printf("%.{digits}g", v)` prints it; `None` for a NaN.
pub(super) fn g(v: f64, digits: usize) -> Option<String> {
    if v.is_nan() {
        return None;
    }
    if v.is_infinite() {
        return Some(if v < 0.0 { "-inf" } else { "inf" }.into());
    }
    // The exponent as `%e` with digits - 1 decimals rounds it decides the style.
    let e = format!("{:.*e}", digits - 1, v);
    let (mantissa, exp) = e.split_once('e')?;
    let exp: i32 = exp.parse().ok()?;
    if exp < -4 || exp >= digits as i32 {
        let sign = if exp < 0 { '-' } else { '+' };
        return Some(format!("{}e{sign}{:02}", trim(mantissa), exp.abs()));
    }
    let fixed = format!("{:.*}", (digits as i32 - 1 - exp) as usize, v);
    Some(trim(&fixed).to_owned())
}

/// Without trailing zeros after the decimal point, nor the point itself then.
fn trim(s: &str) -> &str {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.')
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::g;

    #[test]
    fn as_gdb_13_printed_them() {
        let f = |v: f32| g(f64::from(v), 9).unwrap();
        assert_eq!(f(1.5), "1.5");
        assert_eq!(f(0.1), "0.100000001");
        assert_eq!(f(1e20), "1.00000002e+20");
        assert_eq!(f(-0.0), "-0");
        assert_eq!(f(3.0), "3");
        assert_eq!(f(1e-5), "9.99999975e-06");
        assert_eq!(f(123456789.0), "123456792");
        let d = |v: f64| g(v, 17).unwrap();
        assert_eq!(d(2.14), "2.1400000000000001");
        assert_eq!(d(0.1), "0.10000000000000001");
        assert_eq!(d(1e300), "1.0000000000000001e+300");
        assert_eq!(d(1.0 / 3.0), "0.33333333333333331");
        assert_eq!(d(100.0), "100");
        assert_eq!(d(1e-320), "9.9998886718268301e-321");
        assert_eq!(d(12345678901234567890.0), "1.2345678901234567e+19");
        assert_eq!(d(1e16), "10000000000000000");
        assert_eq!(d(1e17), "1e+17");
        assert_eq!(d(0.0001), "0.0001");
        assert_eq!(d(0.00001), "1.0000000000000001e-05");
        assert_eq!(d(0.0), "0");
        assert_eq!(d(f64::NEG_INFINITY), "-inf");
        assert_eq!(g(f64::NAN, 17), None);
    }
}
