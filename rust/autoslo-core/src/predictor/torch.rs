//! The TorchScript artifact executed by libtorch (tch): the reference implementation of Iconq+.
//!
//! The exported module (see `python/autoslo/predictor/model.py`) has, besides `forward` (the batched
//! training path), three step methods that mirror [`Kernel`]: `before_state(xs[T,D]) -> [2,H]`,
//! `after_step(x[D], state[2,H]) -> [2,H]` and `head_log(h_b[H], h_a[H], ln_stage[1]) -> [1]`.

use std::path::Path;

use tch::{CModule, Device, Kind, Tensor};

use super::features::INTERACTION_DIM;
use super::iconq::{Kernel, LstmState, NamedTensors};
use crate::error::{AutoSloError, Result};

/// An Iconq+ TorchScript module loaded with libtorch.
pub struct TchKernel {
    module: CModule,
    hidden: usize,
    origin: String,
}

fn terr(origin: &str, what: &str, e: tch::TchError) -> AutoSloError {
    AutoSloError::model(origin, format!("{what}: {e}"))
}

impl TchKernel {
    /// Load a TorchScript file on the CPU in eval mode.
    pub fn load(path: &Path) -> Result<Self> {
        let origin = path.display().to_string();
        let mut module = CModule::load_on_device(path, Device::Cpu).map_err(|e| terr(&origin, "not a loadable TorchScript module", e))?;
        module.set_eval();
        let mut k = Self { module, hidden: 0, origin };
        let named = k.named_parameters()?;
        k.hidden = named
            .get("lstm_before.weight_hh_l0")
            .map(|(s, _)| s.get(1).copied().unwrap_or(0))
            .ok_or_else(|| AutoSloError::model(&k.origin, "no parameter `lstm_before.weight_hh_l0`: not an Iconq+ module"))?;
        Ok(k)
    }

    /// The module's parameters by name (f32, row-major), as the native kernel reads them.
    pub fn named_parameters(&self) -> Result<NamedTensors> {
        let ps = self.module.named_parameters().map_err(|e| terr(&self.origin, "cannot list parameters", e))?;
        let mut out = NamedTensors::new();
        for (name, t) in ps {
            let shape: Vec<usize> = t.size().iter().map(|&d| d as usize).collect();
            let flat = t.to_kind(Kind::Float).contiguous().view([-1]);
            let data = Vec::<f32>::try_from(&flat).map_err(|e| terr(&self.origin, &format!("parameter `{name}`"), e))?;
            out.insert(name, (shape, data));
        }
        Ok(out)
    }

    fn call(&self, method: &str, args: &[Tensor]) -> Result<Vec<f32>> {
        let out = tch::no_grad(|| self.module.method_ts(method, args)).map_err(|e| terr(&self.origin, &format!("method `{method}`"), e))?;
        Vec::<f32>::try_from(&out.to_kind(Kind::Float).contiguous().view([-1])).map_err(|e| terr(&self.origin, method, e))
    }

    /// The batched `forward` (the path training used) on one sample.
    pub fn forward_one(&self, before: &[[f32; INTERACTION_DIM]], after: &[[f32; INTERACTION_DIM]], ln_stage: f32) -> Result<f32> {
        let d = INTERACTION_DIM as i64;
        let flat = |xs: &[[f32; INTERACTION_DIM]]| -> Tensor {
            let n = xs.len().max(1) as i64;
            let mut v: Vec<f32> = xs.iter().flatten().copied().collect();
            v.resize((n * d) as usize, 0.0);
            Tensor::from_slice(&v).view([1, n, d])
        };
        let args = [
            flat(before),
            Tensor::from_slice(&[before.len() as i64]),
            flat(after),
            Tensor::from_slice(&[after.len() as i64]),
            Tensor::from_slice(&[ln_stage]),
        ];
        let out = self.call("forward", &args)?;
        out.first().copied().ok_or_else(|| AutoSloError::model(&self.origin, "forward returned nothing"))
    }
}

impl Kernel for TchKernel {
    fn hidden(&self) -> usize {
        self.hidden
    }

    fn before(&self, xs: &[[f32; INTERACTION_DIM]]) -> Result<LstmState> {
        if xs.is_empty() {
            return Ok(LstmState::zeros(self.hidden));
        }
        let v: Vec<f32> = xs.iter().flatten().copied().collect();
        let out = self.call("before_state", &[Tensor::from_slice(&v).view([xs.len() as i64, INTERACTION_DIM as i64])])?;
        split_state(out, self.hidden, &self.origin)
    }

    fn after_step(&self, x: &[f32; INTERACTION_DIM], st: &mut LstmState) -> Result<()> {
        let mut s = st.h.clone();
        s.extend_from_slice(&st.c);
        let out = self.call("after_step", &[Tensor::from_slice(x.as_slice()), Tensor::from_slice(&s).view([2, self.hidden as i64])])?;
        *st = split_state(out, self.hidden, &self.origin)?;
        Ok(())
    }

    fn head(&self, hb: &[f32], ha: &[f32], ln_stage: f32) -> Result<f32> {
        let out = self.call("head_log", &[Tensor::from_slice(hb), Tensor::from_slice(ha), Tensor::from_slice(&[ln_stage])])?;
        out.first().copied().ok_or_else(|| AutoSloError::model(&self.origin, "head_log returned nothing"))
    }

    fn name(&self) -> &'static str {
        "tch"
    }
}

fn split_state(v: Vec<f32>, hidden: usize, origin: &str) -> Result<LstmState> {
    if v.len() != 2 * hidden {
        return Err(AutoSloError::model(origin, format!("state of {} values, expected {}", v.len(), 2 * hidden)));
    }
    Ok(LstmState { h: v[..hidden].to_vec(), c: v[hidden..].to_vec() })
}
