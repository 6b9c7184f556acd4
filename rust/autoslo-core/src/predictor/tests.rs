//! Tests against the bundled trained model (libtorch required: feature `torch`).

use std::path::PathBuf;

use super::*;
use crate::workload::base_workload;

fn bundled(variant: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../python/autoslo/models").join(variant)
}

#[test]
fn bundled_models_load_and_native_matches_libtorch() {
    for v in ["iconq_plus", "censored", "size", "iconq"] {
        let p = Predictor::load(&bundled(v), Backend::Native).unwrap();
        assert!(p.verified_max_abs_diff <= VERIFY_TOLERANCE, "{v}: {}", p.verified_max_abs_diff);
        assert!(p.verify(50, 7).unwrap() <= VERIFY_TOLERANCE);
    }
}

#[test]
fn incremental_native_and_tch_agree_on_a_workload() {
    let p = Predictor::load(&bundled("iconq_plus"), Backend::Native).unwrap();
    let t = p.with_backend(Backend::Tch);
    let w = base_workload(0.5, 3, &crate::slo::SloTable::paper(2.0).unwrap()).unwrap();
    let (mut a, mut b) = (p.cluster(8).unwrap(), t.cluster(8).unwrap());
    for q in w.queries().iter().take(40) {
        let f = p.query(q.id, q.text, q.arrival, 8).unwrap();
        let ua = a.add_arrival(p.kernel(), f).unwrap();
        let ub = b.add_arrival(t.kernel(), f).unwrap();
        assert!((ua.prediction.ln() - ub.prediction.ln()).abs() <= 1e-5);
        for ((_, x), (_, y)) in ua.updated.iter().zip(&ub.updated) {
            assert!((x.ln() - y.ln()).abs() <= 1e-5);
        }
    }
    assert_eq!(a.len(), 40);
}

#[test]
fn predictions_grow_with_congestion_and_shrink_with_size() {
    // Not a wall-clock check: the trained model must have learned the emulator's two main effects.
    let p = Predictor::load(&bundled("iconq_plus"), Backend::Native).unwrap();
    let text = crate::catalog::QueryText { template: 4, instance: 1 };
    let alone = |size| {
        let mut c = p.cluster(size).unwrap();
        c.add_arrival(p.kernel(), p.query(0, text, 0.0, size).unwrap()).unwrap().prediction
    };
    assert!(alone(32) < alone(4));
    let mut c = p.cluster(8).unwrap();
    for i in 0..30u64 {
        let t = crate::catalog::QueryText { template: (i * 7 % 99 + 1) as u16, instance: 1 };
        c.add_arrival(p.kernel(), p.query(i + 1, t, i as f64 * 0.5, 8).unwrap()).unwrap();
    }
    let busy = c.add_arrival(p.kernel(), p.query(100, text, 20.0, 8).unwrap()).unwrap().prediction;
    assert!(busy > 1.5 * alone(8), "busy {busy} vs alone {}", alone(8));
}

#[test]
fn broken_model_directories_are_errors() {
    let dir = std::env::temp_dir().join(format!("autoslo-model-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for f in ["model.pt", "stage.json", "meta.json"] {
        std::fs::copy(bundled("iconq_plus").join(f), dir.join(f)).unwrap();
    }
    std::fs::write(dir.join("stage.json"), b"{}").unwrap();
    let e = Predictor::load(&dir, Backend::Native).unwrap_err().to_string();
    assert!(e.contains("SHA-256"), "{e}");
    std::fs::remove_file(dir.join("meta.json")).unwrap();
    assert!(Predictor::load(&dir, Backend::Native).unwrap_err().to_string().contains("cannot read"));
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(Predictor::load(&dir, Backend::Native).unwrap_err().to_string().contains("no such model directory"));
}

