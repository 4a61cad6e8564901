//! The statistics the tables rest on: median and range, mean ± standard error, paired
//! rounds and the sign test behind a paired verdict.

pub(super) fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    match v.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => v[n / 2],
        n => (v[n / 2 - 1] + v[n / 2]) / 2.0,
    }
}

pub(super) fn min_max(values: &[f64]) -> (f64, f64) {
    values
        .iter()
        .fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), v| {
            (lo.min(*v), hi.max(*v))
        })
}

/// Mean and its standard error (sample standard deviation ÷ √n); None below two values.
pub(super) fn mean_se(values: &[f64]) -> Option<(f64, f64)> {
    if values.len() < 2 {
        return None;
    }
    let n = values.len() as f64;
    let mean = values.iter().sum::<f64>() / n;
    let var = values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / (n - 1.0);
    Some((mean, (var / n).sqrt()))
}

/// `a[i] ÷ b[i]` for the rounds both have (one value per round, in run order); empty when a
/// program went unseen in some round of one and not the other, as the rounds no longer pair.
pub(super) fn paired_ratios(a: &[f64], b: &[f64]) -> Vec<f64> {
    if a.len() != b.len() {
        return Vec::new();
    }
    a.iter()
        .zip(b)
        .filter(|(_, b)| **b > 0.0)
        .map(|(a, b)| a / b)
        .collect()
}

/// Verdict on "ratio ≥ 1" from paired rounds. ✅ when the median is ≥ 1; ❌ only when ours
/// lost in so many rounds that chance explains it with p < 0.05 (one-sided sign test);
/// otherwise the rounds disagree and the difference is below what this machine resolves.
pub(super) fn versus(paired: &[f64]) -> &'static str {
    if paired.is_empty() {
        return "";
    }
    if median(paired) >= 1.0 {
        return "✅";
    }
    let wins = paired.iter().filter(|r| **r >= 1.0).count();
    if sign_test_p(wins, paired.len()) < 0.05 {
        "❌"
    } else {
        "≈ (noise)"
    }
}

/// P(X ≤ wins) for X ~ Binomial(n, ½): how likely this few wins are if both were equal.
fn sign_test_p(wins: usize, n: usize) -> f64 {
    let mut p = 0.0;
    let mut choose = 1.0; // C(n, k)
    for k in 0..=wins.min(n) {
        if k > 0 {
            choose = choose * (n + 1 - k) as f64 / k as f64;
        }
        p += choose;
    }
    p / 2f64.powi(n as i32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_and_range() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), 2.5);
        assert_eq!(min_max(&[0.99, 1.01, 0.97]), (0.97, 1.01));
        let (mean, se) = mean_se(&[1.0, 3.0]).unwrap();
        assert_eq!((mean, se), (2.0, 1.0));
        assert!(mean_se(&[1.0]).is_none());
    }

    #[test]
    fn paired_verdict_needs_a_significant_loss() {
        assert!((sign_test_p(0, 5) - 1.0 / 32.0).abs() < 1e-12);
        assert!((sign_test_p(1, 5) - 6.0 / 32.0).abs() < 1e-12);
        assert!((sign_test_p(5, 5) - 1.0).abs() < 1e-12);
        assert_eq!(versus(&[1.01, 0.99, 1.0]), "✅");
        assert_eq!(versus(&[0.98, 0.97, 0.99, 0.96, 0.95]), "❌");
        assert_eq!(versus(&[0.98, 1.02, 0.99, 0.96, 1.05]), "≈ (noise)");
        assert_eq!(versus(&[]), "");
    }
}
