//! Latency summaries for the macro benchmarks: nearest-rank percentiles and the mean of a
//! set of samples in microseconds.

/// Summary of latency samples, in microseconds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    /// Number of samples.
    pub count: usize,
    /// Median (nearest rank).
    pub p50: f64,
    /// 99th percentile (nearest rank).
    pub p99: f64,
    /// Arithmetic mean.
    pub mean: f64,
    /// Smallest sample.
    pub min: f64,
    /// Largest sample.
    pub max: f64,
}

/// The nearest-rank `q` quantile (`0 < q <= 1`) of sorted samples; 0 for no samples.
pub fn percentile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// Summarizes `samples` (any order).
pub fn summarize(samples: &[f64]) -> Summary {
    let mut s = samples.to_vec();
    s.sort_by(f64::total_cmp);
    let mean = if s.is_empty() {
        0.0
    } else {
        s.iter().sum::<f64>() / s.len() as f64
    };
    Summary {
        count: s.len(),
        p50: percentile(&s, 0.50),
        p99: percentile(&s, 0.99),
        mean,
        min: s.first().copied().unwrap_or(0.0),
        max: s.last().copied().unwrap_or(0.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let v: Vec<f64> = (1..=200).map(f64::from).collect();
        let s = summarize(&v);
        assert_eq!((s.p50, s.p99, s.min, s.max), (100.0, 198.0, 1.0, 200.0));
        assert_eq!(s.mean, 100.5);
        assert_eq!(summarize(&[5.0]).p99, 5.0);
        assert_eq!(summarize(&[]).count, 0);
    }
}
