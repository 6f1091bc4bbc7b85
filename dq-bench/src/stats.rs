//! Percentiles and the JSON line of BENCH.md.

use dq_testkit::stats::percentile;
use serde_json::{json, Value};

pub(crate) fn summary(values: &[f64]) -> Value {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    v.sort_by(f64::total_cmp);
    json!({
        "p50": round3(percentile(&v, 0.50)),
        "p99": round3(percentile(&v, 0.99)),
        "max": round3(v.last().copied().unwrap_or(f64::NAN)),
        "min": round3(v.first().copied().unwrap_or(f64::NAN)),
    })
}

pub(crate) fn round3(x: f64) -> Value {
    if x.is_finite() {
        json!((x * 1000.0).round() / 1000.0)
    } else {
        Value::Null
    }
}

pub(crate) fn rate(n: usize, window_ms: f64) -> Value {
    if window_ms > 0.0 {
        round3(n as f64 / (window_ms / 1000.0))
    } else {
        Value::Null
    }
}
