//! The Policy Tuner (§7): it plans tomorrow from history. The Workload Reservoir's tables (kept on
//! disk by the Python package) feed the Workload Forecaster ([`forecaster`]); forecasts are
//! simulated by `SimulateBatch` ([`batch`]); the Spinup Scheduler ([`scheduler`],
//! Algorithms 4–5) adds scheduled spinups; the Configuration Tuner ([`config_tuner`]) tunes the
//! Autoscaler's parameters; the result is an execution configuration ([`config`]).
//!
//! [`tune`] runs the whole pipeline: forecast → ScheduleSpinups over the initial candidates →
//! Configuration Tuner around E★ → the configuration, with its validation figures.

pub mod batch;
pub mod config;
pub mod config_tuner;
pub mod forecaster;
pub mod scheduler;

pub use batch::{agg_perf, simulate_batch, simulate_config, Aggregate, BatchBackend, BatchControl, BatchSettings, LoggedQuery, RayonBackend, SimOutcome};
pub use config::{AutoscalerKnobs, ExecutionConfig, Provenance, ScheduledSpinup};
pub use config_tuner::{tune_config, ConfigTuneResult, ConfigTunerParams, SearchSpace, Strategy};
pub use forecaster::{forecast, weekday, ArrivalRow, CountRow, Date, ForecastPolicy, ForecastSettings, Forecasts, History};
pub use scheduler::{find_good_spinup_time, schedule_spinups, ScheduleResult, SchedulerParams, SpinupTimeParams};

use crate::error::Result;
use crate::predictor::Predictor;
use crate::slo::SloTable;

/// `YYYY-MM-DD` of a date (days since 1970-01-01), proleptic Gregorian.
pub fn date_string(date: Date) -> String {
    // Howard Hinnant's civil_from_days.
    let z = date as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// Everything the Policy Tuner takes.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicyTunerParams {
    pub forecast: ForecastSettings,
    /// The initial configurations I that ScheduleSpinups evolves (e.g. one per initial cluster set).
    pub initial: Vec<ExecutionConfig>,
    pub scheduler: SchedulerParams,
    /// The Configuration Tuner's space around E★ (all empty: skip it).
    pub space: SearchSpace,
    pub config_tuner: ConfigTunerParams,
}

/// The Policy Tuner's result.
#[derive(Debug, Clone, PartialEq)]
pub struct TuneReport {
    /// The execution configuration for the target day (with provenance).
    pub config: ExecutionConfig,
    pub schedule: ScheduleResult,
    pub tuning: Option<ConfigTuneResult>,
    pub forecast_policy: &'static str,
    pub days_used: Vec<Date>,
    pub training_forecasts: usize,
    pub validation_forecasts: usize,
    /// Mean queries per forecast.
    pub forecast_queries: f64,
    /// (violation rate, cost) of `config` on the validation forecasts.
    pub validation: (f64, f64),
    pub simulations: usize,
}

/// Tune the execution configuration of day `target` from `history`.
#[allow(clippy::too_many_arguments)]
pub fn tune(predictor: &Predictor, history: &History, target: Date, slo: &SloTable, params: &PolicyTunerParams, settings: &BatchSettings, backend: &dyn BatchBackend, control: &BatchControl) -> Result<TuneReport> {
    let f = forecast(history, target, slo, &params.forecast)?;
    let forecast_queries = f.training.iter().chain(&f.validation).map(|w| w.len() as f64).sum::<f64>() / (f.training.len() + f.validation.len()) as f64;
    let schedule = schedule_spinups(predictor, &params.initial, &f.training, &f.validation, &params.scheduler, settings, backend, control)?;
    let mut validation = schedule.candidates[schedule.chosen].validation;
    let mut simulations = schedule.simulations;
    let mut config = schedule.best.clone();
    let no_space = SearchSpace { ..Default::default() } == params.space;
    let tuning = if no_space {
        None
    } else {
        let t = tune_config(predictor, &schedule.best, &params.space, &f.training, &f.validation, &params.config_tuner, settings, backend, control)?;
        simulations += t.simulations;
        config = t.best.clone();
        if let Some(v) = t.evaluated.iter().find(|e| e.config == config).and_then(|e| e.validation) {
            validation = v;
        }
        Some(t)
    };
    config.provenance = Some(Provenance {
        generated_by: Some(format!("autoslo {}", env!("CARGO_PKG_VERSION"))),
        day: Some(date_string(target)),
        history_days: Some(history.days.iter().filter(|&&d| d < target).count() as u32),
        training_forecasts: Some(f.training.len()),
        validation_forecasts: Some(f.validation.len()),
        tau: Some(params.scheduler.tau),
        validation_violation_rate: Some(validation.0),
        validation_cost: Some(validation.1),
    });
    Ok(TuneReport {
        config,
        schedule,
        tuning,
        forecast_policy: f.policy_used,
        days_used: f.days_used,
        training_forecasts: f.training.len(),
        validation_forecasts: f.validation.len(),
        forecast_queries,
        validation,
        simulations,
    })
}

#[cfg(test)]
mod tests;
