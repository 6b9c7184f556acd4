//! Small numeric helpers shared by the summaries and the calibration.

/// Quantile by linear interpolation between order statistics (`q` in [0, 1]); `None` when empty.
/// Sorts a copy: O(n log n).
pub fn quantile(values: &[f64], q: f64) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| !x.is_nan()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let pos = q.clamp(0.0, 1.0) * (v.len() - 1) as f64;
    let lo = pos.floor() as usize;
    let hi = pos.ceil() as usize;
    Some(v[lo] + (v[hi] - v[lo]) * (pos - lo as f64))
}

/// Median; `None` when empty.
pub fn median(values: &[f64]) -> Option<f64> {
    quantile(values, 0.5)
}

/// Q-error of an estimate against a truth: max(est/true, true/est) (both positive).
pub fn q_error(estimate: f64, truth: f64) -> f64 {
    (estimate / truth).max(truth / estimate)
}
