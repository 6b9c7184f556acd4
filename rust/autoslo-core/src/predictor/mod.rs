//! The Latency Predictor (§4): Stage for concurrency-unaware estimates, Iconq+ for latency under
//! concurrency, served incrementally per cluster.
//!
//! - [`features`]: plan features and interaction feature vectors (shared by training and serving);
//! - [`stage`]: measured-runtime cache plus exported gradient-boosted trees;
//! - [`iconq`]: the network and its native f32 kernel; [`torch`] (feature `torch`): the same
//!   network executed by libtorch from the TorchScript artifact;
//! - [`incremental`]: per-cluster state with arrival / counterfactual / commit / complete;
//! - [`dataset`]: training and evaluation samples from traces (with censored observations);
//! - [`arrival`]: the correction of predictions made at arrival, before any after-neighbour exists.
//!
//! A model directory holds `model.pt` (TorchScript), `stage.json`, `meta.json` and optionally
//! `arrival.json` (the at-arrival correction, fitted after training) and `classes.json` (the
//! plan features of a history's query classes, for a model trained on one); the metadata
//! names the feature layout, the variant, and SHA-256 digests of the files and the training data.
//! [`Predictor::load`] checks all of it and verifies the native kernel against libtorch.

pub mod arrival;
pub mod classes;
pub mod dataset;
pub mod features;
pub mod iconq;
pub mod incremental;
pub mod stage;
#[cfg(feature = "torch")]
pub mod torch;
pub mod trees;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use sha2::{Digest, Sha256};

use crate::catalog::QueryText;
use crate::error::{AutoSloError, Result};
pub use dataset::{Dataset, DatasetOptions, TraceQuery};
pub use features::{FeatureOptions, QueryFeatures, FEATURE_VERSION, INTERACTION_DIM};
pub use iconq::{Kernel, LstmState, NativeKernel};
pub use incremental::{ArrivalUpdate, BeforePass, ClusterState, Counterfactual, RunningQuery};
pub use arrival::{ArrivalCorrection, ArrivalSample};
pub use classes::{ClassFeatures, Featurizer, QueryRef};
pub use stage::{Stage, StagePath};

#[cfg(all(test, feature = "torch"))]
mod tests;

/// Format tag and version of `meta.json` this build reads.
pub const MODEL_FORMAT: &str = "autoslo-iconq";
pub const MODEL_FORMAT_VERSION: u32 = 1;
/// Largest |native − libtorch| (ln seconds) accepted when a model is loaded.
pub const VERIFY_TOLERANCE: f32 = 1e-5;

/// Contents of `meta.json`.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct ModelMeta {
    pub format: String,
    pub format_version: u32,
    pub feature_version: u32,
    /// "iconq", "size", "censored" or "iconq+" (the paper's ablation names).
    pub variant: String,
    pub size_features: bool,
    pub after_chronological: bool,
    pub censored_prob: f64,
    pub embedding: usize,
    pub hidden: usize,
    pub model_sha256: String,
    pub stage_sha256: String,
    pub training_data_sha256: String,
    /// SHA-256 of `arrival.json`, if the model has an at-arrival correction.
    #[serde(default)]
    pub arrival_sha256: Option<String>,
    /// SHA-256 of `classes.json`, if the model was trained on a history's query classes.
    #[serde(default)]
    pub classes_sha256: Option<String>,
}

/// SHA-256 of a file, lowercase hex.
pub fn sha256_file(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).map_err(|e| AutoSloError::model(path.display(), format!("cannot read: {e}")))?;
    Ok(Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect())
}

/// Read and check `meta.json` of a model directory.
pub fn read_meta(dir: &Path) -> Result<ModelMeta> {
    let path = dir.join("meta.json");
    if !dir.is_dir() {
        return Err(AutoSloError::model(dir.display(), "no such model directory"));
    }
    let text = std::fs::read_to_string(&path).map_err(|e| AutoSloError::model(path.display(), format!("cannot read: {e}")))?;
    let m: ModelMeta = serde_json::from_str(&text).map_err(|e| AutoSloError::model(path.display(), format!("not an AutoSLO model description ({e})")))?;
    if m.format != MODEL_FORMAT {
        return Err(AutoSloError::model(path.display(), format!("format `{}`, expected `{MODEL_FORMAT}`", m.format)));
    }
    if m.format_version != MODEL_FORMAT_VERSION || m.feature_version != FEATURE_VERSION {
        return Err(AutoSloError::model(
            path.display(),
            format!(
                "model format {} with feature layout {}, but this AutoSLO reads format {MODEL_FORMAT_VERSION} with layout {FEATURE_VERSION}; retrain it with `autoslo predictor train`",
                m.format_version, m.feature_version
            ),
        ));
    }
    let mut files = vec![("model.pt", &m.model_sha256), ("stage.json", &m.stage_sha256)];
    if let Some(a) = &m.arrival_sha256 {
        files.push(("arrival.json", a));
    }
    if let Some(c) = &m.classes_sha256 {
        files.push(("classes.json", c));
    }
    for (file, want) in files {
        let got = sha256_file(&dir.join(file))?;
        if &got != want {
            return Err(AutoSloError::model(dir.join(file).display(), format!("SHA-256 {got} does not match meta.json ({want}): the file is corrupt or from another model")));
        }
    }
    Ok(m)
}

/// Which implementation serves predictions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The hand-written f32 kernel (fast; verified against libtorch on load).
    Native,
    /// libtorch executing the TorchScript module (the reference).
    Tch,
}

impl Backend {
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "native" => Ok(Self::Native),
            "tch" | "torch" => Ok(Self::Tch),
            other => Err(AutoSloError::UnknownPolicy { name: other.into(), known: "native, tch".into() }),
        }
    }
}

/// A loaded Latency Predictor: Stage, Iconq+ kernels and metadata.
#[derive(Clone)]
pub struct Predictor {
    pub meta: ModelMeta,
    pub stage: Arc<Stage>,
    /// The at-arrival correction (`arrival.json`), if the model has one and it is in use.
    pub arrival: Option<Arc<ArrivalCorrection>>,
    /// The plan features of a history's classes (`classes.json`), for a model trained on one.
    pub classes: Option<Arc<ClassFeatures>>,
    pub dir: PathBuf,
    native: Arc<NativeKernel>,
    #[cfg(feature = "torch")]
    tch: Arc<torch::TchKernel>,
    backend: Backend,
    /// Largest |native − libtorch| seen when verifying on load.
    pub verified_max_abs_diff: f32,
}

impl std::fmt::Debug for Predictor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Predictor").field("dir", &self.dir).field("variant", &self.meta.variant).field("backend", &self.backend).finish()
    }
}

impl Predictor {
    /// Load a model directory, check its metadata and digests, and verify the native kernel
    /// against libtorch on probe sequences.
    #[cfg(feature = "torch")]
    pub fn load(dir: &Path, backend: Backend) -> Result<Self> {
        let meta = read_meta(dir)?;
        let stage = Stage::load(&dir.join("stage.json"))?;
        let arrival = match meta.arrival_sha256 {
            Some(_) => Some(Arc::new(ArrivalCorrection::load(&dir.join("arrival.json"))?)),
            None => None,
        };
        let tch = torch::TchKernel::load(&dir.join("model.pt"))?;
        let native = NativeKernel::from_named(&tch.named_parameters()?, &dir.join("model.pt").display().to_string())?;
        let (e, h, _) = native.dims();
        if (e, h) != (meta.embedding, meta.hidden) {
            return Err(AutoSloError::model(dir.display(), format!("model.pt has embedding {e}/hidden {h} but meta.json says {}/{}", meta.embedding, meta.hidden)));
        }
        let classes = match meta.classes_sha256 {
            Some(_) => Some(Arc::new(ClassFeatures::load(&dir.join("classes.json"))?)),
            None => None,
        };
        let mut p = Self { meta, stage: Arc::new(stage), arrival, classes, dir: dir.to_path_buf(), native: Arc::new(native), tch: Arc::new(tch), backend, verified_max_abs_diff: 0.0 };
        let diff = p.verify(24, 0)?;
        if diff > VERIFY_TOLERANCE {
            return Err(AutoSloError::model(dir.display(), format!("native kernel differs from libtorch by {diff:e} (> {VERIFY_TOLERANCE:e}) in ln seconds")));
        }
        p.verified_max_abs_diff = diff;
        Ok(p)
    }

    /// Largest |native − libtorch| (ln s) over `n` probe samples: step methods and batched `forward`.
    #[cfg(feature = "torch")]
    pub fn verify(&self, n: usize, seed: u64) -> Result<f32> {
        let mut r = crate::rng::Rng::new(seed ^ 0x5eed);
        let mut worst = 0f32;
        for i in 0..n {
            let size = [4u32, 8, 16, 32][r.below(4)];
            let (nb, na) = (r.below(12), if i % 3 == 0 { 0 } else { r.below(12) });
            let mut t = 0.0;
            let mut qs = Vec::new();
            for id in 0..(nb + 1 + na) as u64 {
                t += r.exponential(0.2);
                let text = QueryText { template: 1 + r.below(99) as u16, instance: 1 + r.below(3) as u16 };
                qs.push(self.query(id, text, t, size)?);
            }
            let target = qs[nb];
            let mut x = [0f32; INTERACTION_DIM];
            let mut vecs = |ns: &[QueryFeatures]| -> Vec<[f32; INTERACTION_DIM]> {
                ns.iter()
                    .map(|n| {
                        features::interaction(&target, n, size, self.features(), &mut x);
                        x
                    })
                    .collect()
            };
            let before = vecs(&qs[..=nb]);
            let mut after = vecs(&qs[nb + 1..]);
            if !self.meta.after_chronological {
                after.reverse();
            }
            let ln_stage = target.f[features::QUERY_DIM - 1];
            let native = iconq::predict_sequence(self.native.as_ref(), &before, &after, ln_stage)?;
            let stepped = iconq::predict_sequence(self.tch.as_ref(), &before, &after, ln_stage)?;
            let batched = self.tch.forward_one(&before, &after, ln_stage)?;
            worst = worst.max((native - stepped).abs()).max((native - batched).abs());
            // The served path: the same arrivals through the incremental state (cached head
            // prefixes, split embeddings), which only Iconq+'s chronological after-order allows.
            if self.meta.after_chronological {
                let mut c = self.cluster(size)?;
                for q in &qs {
                    c.add_arrival(self.native.as_ref(), *q)?;
                }
                let served = c.running()[nb].ln_pred;
                worst = worst.max((served - stepped).abs());
            }
            if !native.is_finite() {
                return Err(AutoSloError::model(self.dir.display(), "prediction is not finite"));
            }
        }
        Ok(worst)
    }

    /// Whether `other` is this very loaded model (clones of one [`Predictor::load`] with the same
    /// backend): cluster states one of them computed are the other's too.
    pub fn same_model(&self, other: &Predictor) -> bool {
        let same_arrival = match (&self.arrival, &other.arrival) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        Arc::ptr_eq(&self.native, &other.native) && Arc::ptr_eq(&self.stage, &other.stage) && same_arrival && self.backend == other.backend
    }

    /// The kernel chosen at load time.
    pub fn kernel(&self) -> &dyn Kernel {
        match self.backend {
            Backend::Native => self.native.as_ref(),
            #[cfg(feature = "torch")]
            Backend::Tch => self.tch.as_ref(),
            #[cfg(not(feature = "torch"))]
            Backend::Tch => self.native.as_ref(),
        }
    }

    pub fn native(&self) -> &NativeKernel {
        &self.native
    }

    #[cfg(feature = "torch")]
    pub fn tch(&self) -> &torch::TchKernel {
        &self.tch
    }

    pub fn backend(&self) -> Backend {
        self.backend
    }

    /// A copy serving through another backend.
    pub fn with_backend(&self, backend: Backend) -> Self {
        Self { backend, ..self.clone() }
    }

    /// A copy that serves raw Iconq+ predictions at arrival (no correction): for ablations.
    pub fn without_arrival_correction(&self) -> Self {
        Self { arrival: None, ..self.clone() }
    }

    /// A query's latency prediction at arrival (s) on a cluster of `size` RPU with `running` queries:
    /// Iconq+'s `prediction_s` through the at-arrival correction if the model has one.
    pub fn at_arrival(&self, prediction_s: f64, stage_s: f64, size: u32, running: usize) -> f64 {
        match &self.arrival {
            Some(a) => a.correct(prediction_s, stage_s, size, running),
            None => prediction_s,
        }
    }

    pub fn features(&self) -> FeatureOptions {
        FeatureOptions { size_features: self.meta.size_features }
    }

    /// A query's features on a cluster of `size` RPU (Stage estimate included).
    pub fn query(&self, id: u64, text: QueryText, arrival: f64, size: u32) -> Result<QueryFeatures> {
        QueryFeatures::new(id, text.template, arrival, self.stage.estimate(text, size)?)
    }

    /// How this model featurises a query (a TPC-DS text, or one of its classes).
    pub fn featurizer(&self) -> Featurizer<'_> {
        Featurizer { stage: &self.stage, classes: self.classes.as_deref() }
    }

    /// Incremental state of an idle cluster of `size` RPU.
    pub fn cluster(&self, size: u32) -> Result<ClusterState> {
        ClusterState::new(size, self.features())
    }

    /// Sample options matching this model, for evaluation (no sampled partial sets).
    pub fn eval_options(&self) -> DatasetOptions {
        DatasetOptions { features: self.features(), after_chronological: self.meta.after_chronological, censored_prob: 0.0, seed: 0, keep_timeouts: true }
    }
}
