//! Queries as the predictor knows them: a text of the built-in TPC-DS catalog, or a class of a
//! warehouse's own history with its plan features ([`ClassFeatures`], `classes.json` of a model
//! trained on that history). [`Featurizer`] turns either into a query's features on a size.

use std::collections::HashMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::features::{plan_features, QueryFeatures, PLAN_DIM};
use super::stage::Stage;
use crate::catalog::QueryText;
use crate::error::{AutoSloError, Result};
use crate::plan::PlanSchema;

/// Format tag and version of `classes.json`.
pub const CLASSES_FORMAT: &str = "autoslo-classes";
pub const CLASSES_FORMAT_VERSION: u32 = 1;

/// A query: a TPC-DS text, or a class of a history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QueryRef {
    Tpcds(QueryText),
    /// A class id (`crate::sql::QueryClass`).
    Class(u64),
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct ClassesJson {
    format: String,
    format_version: u32,
    schema: PlanSchema,
    /// (class id, plan features)
    classes: Vec<(u64, Vec<f32>)>,
}

/// The plan features of every class of a history, under its schema.
#[derive(Debug, Clone)]
pub struct ClassFeatures {
    pub schema: PlanSchema,
    rows: HashMap<u64, [f32; PLAN_DIM]>,
}

impl ClassFeatures {
    /// Load `classes.json`.
    pub fn load(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| AutoSloError::model(path.display(), format!("cannot read: {e}")))?;
        Self::from_json(&text, &path.display().to_string())
    }

    /// Parse and check `classes.json` (`origin` names it in errors).
    pub fn from_json(text: &str, origin: &str) -> Result<Self> {
        let bad = |p: String| AutoSloError::model(origin, p);
        let j: ClassesJson = serde_json::from_str(text).map_err(|e| bad(format!("not a class-feature table ({e})")))?;
        if j.format != CLASSES_FORMAT || j.format_version != CLASSES_FORMAT_VERSION {
            return Err(bad(format!("format `{}` version {}, expected `{CLASSES_FORMAT}` version {CLASSES_FORMAT_VERSION}", j.format, j.format_version)));
        }
        let schema = PlanSchema::from_json(&serde_json::to_string(&j.schema).expect("a schema serialises")).map_err(|e| bad(e.to_string()))?;
        let mut rows = HashMap::with_capacity(j.classes.len());
        for (id, v) in j.classes {
            let v: [f32; PLAN_DIM] = v.as_slice().try_into().map_err(|_| bad(format!("class {id}: {} features, expected {PLAN_DIM}", v.len())))?;
            if v.iter().any(|x| !x.is_finite()) {
                return Err(bad(format!("class {id}: a feature is not finite")));
            }
            if rows.insert(id, v).is_some() {
                return Err(bad(format!("class {id} appears twice")));
            }
        }
        Ok(Self { schema, rows })
    }

    /// A class's plan features.
    pub fn get(&self, class: u64) -> Result<&[f32; PLAN_DIM]> {
        self.rows.get(&class).ok_or_else(|| AutoSloError::InvalidConfig(format!("query class {class} is not among the model's {} classes", self.rows.len())))
    }

    pub fn len(&self) -> usize {
        self.rows.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

/// Features of queries for one model: its Stage and, for a model trained on a history, its classes.
#[derive(Debug, Clone, Copy)]
pub struct Featurizer<'a> {
    pub stage: &'a Stage,
    pub classes: Option<&'a ClassFeatures>,
}

impl Featurizer<'_> {
    /// A query's plan features.
    pub fn plan(&self, q: QueryRef) -> Result<&[f32; PLAN_DIM]> {
        match q {
            QueryRef::Tpcds(t) => plan_features().get(t.template),
            QueryRef::Class(c) => match self.classes {
                Some(cf) => cf.get(c),
                None => Err(AutoSloError::InvalidConfig(format!("query class {c}: this model was trained on TPC-DS templates, not on a history's classes"))),
            },
        }
    }

    /// A query's features on a cluster of `size` RPU (its Stage estimate included).
    pub fn query(&self, id: u64, q: QueryRef, arrival: f64, size: u32) -> Result<QueryFeatures> {
        let stage_s = match q {
            QueryRef::Tpcds(t) => self.stage.estimate(t, size)?,
            QueryRef::Class(c) => self.stage.estimate_class(c, self.plan(q)?, size)?,
        };
        QueryFeatures::from_plan(id, self.plan(q)?, arrival, stage_s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_tables_load_and_check() {
        let ones = vec![1.0f32; PLAN_DIM];
        let ok = serde_json::json!({"format": CLASSES_FORMAT, "format_version": 1, "schema": {"version": 1, "operators": ["seq_scan"], "tables": []}, "classes": [[u64::MAX, ones]]}).to_string();
        let c = ClassFeatures::from_json(&ok, "t").unwrap();
        assert_eq!(c.get(u64::MAX).unwrap()[0], 1.0);
        assert!(c.get(3).unwrap_err().to_string().contains("not among"));
        let short = ok.replace(&format!("[{}]", vec!["1.0"; PLAN_DIM].join(",")), "[1.0]");
        assert!(ClassFeatures::from_json(&short, "t").is_err());
        let twice = serde_json::json!({"format": CLASSES_FORMAT, "format_version": 1, "schema": {"version": 1, "operators": [], "tables": []}, "classes": [[1, vec![0.0f32; PLAN_DIM]], [1, vec![0.0f32; PLAN_DIM]]]}).to_string();
        assert!(ClassFeatures::from_json(&twice, "t").unwrap_err().to_string().contains("twice"));
    }
}
