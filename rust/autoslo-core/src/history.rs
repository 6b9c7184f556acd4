//! A warehouse's own query history, as the Latency Predictor learns from it: the class of every
//! statement ([`classify`]) and the plan features of every class ([`featurize`]).
//!
//! The history's rows themselves (which are kept, censored or set aside, the workgroups and their
//! sizes, the split by arrival) are read in Python (`autoslo.predictor.history`), where the
//! export's files are; what is per statement and costly, the SQL, is here, on every core.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use rayon::prelude::*;

use crate::error::Result;
use crate::plan::{from_explain_text, from_postgres_json, PlanSchema, PlanSummary, SummarySource};
use crate::predictor::features::PLAN_DIM;
use crate::sql::{class_of_hash, sql_summary, Dialect, QueryClass};

/// How a statement's class was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClassSource {
    /// Its normalised text.
    Text,
    /// The tokenizer could not read it: its raw text, whitespace folded (each variant of its
    /// constants is then a class of its own).
    Raw,
}

/// One statement's class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Classified {
    /// Its class id ([`QueryClass::id`]).
    pub id: u64,
    pub source: ClassSource,
    /// Whether it reads (its first word is `select` or `with`, or it opens with a parenthesis).
    pub select: bool,
}

/// Every statement's class, and each distinct class's text (its normalised text; for a class a
/// `generic_query_hash` names, the normalised text of its first statement classified).
#[derive(Debug, Clone, Default)]
pub struct Classes {
    pub rows: Vec<Classified>,
    pub texts: HashMap<u64, String>,
}

/// The class of every text (on every core, in order). Where `hashes` gives a statement's
/// `generic_query_hash`, that names its class ([`class_of_hash`]); its text still says whether
/// it reads. Only one text per distinct class is kept.
pub fn classify(texts: &[&str], hashes: Option<&[Option<&str>]>, dialect: Dialect) -> Classes {
    let seen: Mutex<HashMap<u64, String>> = Mutex::new(HashMap::new());
    let rows = texts
        .par_iter()
        .enumerate()
        .with_min_len(256)
        .map(|(i, t)| {
            let (class, source, select) = classify_one(t, dialect);
            let id = match hashes.and_then(|h| h[i]) {
                Some(h) => class_of_hash(h).id,
                None => class.id,
            };
            let mut m = seen.lock().unwrap_or_else(PoisonError::into_inner);
            m.entry(id).or_insert(class.text);
            Classified { id, source, select }
        })
        .collect();
    Classes { rows, texts: seen.into_inner().unwrap_or_else(PoisonError::into_inner) }
}

fn classify_one(text: &str, dialect: Dialect) -> (QueryClass, ClassSource, bool) {
    match QueryClass::of(text, dialect) {
        Ok(class) => {
            let first = class.text.split(' ').next().unwrap_or("");
            let select = matches!(first, "select" | "with" | "(");
            (class, ClassSource::Text, select)
        }
        Err(_) => {
            let folded = text.split_whitespace().collect::<Vec<_>>().join(" ");
            let first = folded.split(' ').next().unwrap_or("").to_ascii_lowercase();
            let select = matches!(first.as_str(), "select" | "with") || first.starts_with('(');
            (QueryClass { id: crate::sql::identity::hash_text(&format!("raw:{folded}")), text: folded }, ClassSource::Raw, select)
        }
    }
}

/// A class's plan, as given.
#[derive(Debug, Clone)]
pub enum PlanInput {
    None,
    /// EXPLAIN text (Redshift or PostgreSQL).
    Text(String),
    /// PostgreSQL's EXPLAIN JSON.
    Json(String),
    /// Already read (from `SYS_QUERY_EXPLAIN` rows).
    Summary(PlanSummary),
}

/// One class to featurise: a statement of it, its plan if any, its executions (the schema's weight).
#[derive(Debug, Clone)]
pub struct ClassInput {
    pub sql: Option<String>,
    pub plan: PlanInput,
    pub executions: f64,
}

/// Where a class's features came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeatureSource {
    Plan,
    Sql,
    /// Neither the plan nor the SQL could be read: every plan feature 0.
    Fallback,
}

impl FeatureSource {
    /// `plan`, `sql` or `fallback`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Plan => "plan",
            Self::Sql => "sql",
            Self::Fallback => "fallback",
        }
    }
}

/// Every class's plan features under a schema fitted on them.
#[derive(Debug, Clone)]
pub struct Featurized {
    pub schema: PlanSchema,
    pub vectors: Vec<[f32; PLAN_DIM]>,
    pub sources: Vec<FeatureSource>,
    /// Why a class fell back from its plan to its SQL, or to nothing (`None`: it did not).
    pub problems: Vec<Option<String>>,
}

/// Summarise every class (its plan where given and readable, else its SQL), fit the schema on
/// plan-backed summaries if any class has one, else on all, and vectorise every class. A plan or
/// SQL that cannot be read is not an error: the class falls back and says why.
pub fn featurize(classes: &[ClassInput], dialect: Dialect) -> Featurized {
    let summaries: Vec<(Option<PlanSummary>, Option<String>)> = classes.par_iter().with_min_len(64).map(|c| summarize(c, dialect)).collect();
    let any_plan = summaries.iter().any(|(s, _)| s.as_ref().is_some_and(|s| s.source == SummarySource::Plan));
    let fit_on = summaries.iter().zip(classes).filter_map(|((s, _), c)| s.as_ref().filter(|s| !any_plan || s.source == SummarySource::Plan).map(|s| (s, c.executions)));
    let schema = PlanSchema::fit(fit_on);
    let mut vectors = Vec::with_capacity(classes.len());
    let mut sources = Vec::with_capacity(classes.len());
    let mut problems = Vec::with_capacity(classes.len());
    for (s, problem) in summaries {
        match s {
            Some(s) => {
                vectors.push(schema.vector(&s));
                sources.push(if s.source == SummarySource::Plan { FeatureSource::Plan } else { FeatureSource::Sql });
            }
            None => {
                vectors.push([0.0; PLAN_DIM]);
                sources.push(FeatureSource::Fallback);
            }
        }
        problems.push(problem);
    }
    Featurized { schema, vectors, sources, problems }
}

fn summarize(c: &ClassInput, dialect: Dialect) -> (Option<PlanSummary>, Option<String>) {
    let plan: Option<Result<PlanSummary>> = match &c.plan {
        PlanInput::None => None,
        PlanInput::Text(t) => Some(from_explain_text(t)),
        PlanInput::Json(j) => Some(from_postgres_json(j)),
        PlanInput::Summary(s) => Some(Ok(s.clone())),
    };
    let mut problem = None;
    match plan {
        Some(Ok(s)) => return (Some(s), None),
        Some(Err(e)) => problem = Some(e.to_string()),
        None => {}
    }
    match c.sql.as_deref().map(|q| sql_summary(q, dialect)) {
        Some(Ok(s)) => (Some(s), problem),
        Some(Err(e)) => (None, Some(problem.map_or_else(|| e.to_string(), |p| format!("{p}; {e}")))),
        None => (None, problem.or_else(|| Some("no SQL and no plan".into()))),
    }
}

/// A new statement's class and plan features under `schema`, from its SQL alone (one
/// tokenization; what routing a statement of an unseen class costs). A statement the parser
/// cannot read gets the fallback features (zeros).
pub fn featurize_statement(sql: &str, dialect: Dialect, schema: &PlanSchema) -> Result<(QueryClass, [f32; PLAN_DIM], FeatureSource)> {
    let (class, summary) = crate::sql::class_and_summary(sql, dialect)?;
    Ok(match summary {
        Ok(s) => (class, schema.vector(&s), FeatureSource::Sql),
        Err(_) => (class, [0.0; PLAN_DIM], FeatureSource::Fallback),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classify_keeps_order_and_reads_kinds() {
        let texts = ["select a from t where x = 1", "SELECT a FROM t WHERE x = 2", "insert into t values (1)", "select 'open", "with c as (select 1) select * from c"];
        let all = classify(&texts, None, Dialect::Redshift);
        let c = &all.rows;
        assert_eq!(c[0].id, c[1].id);
        assert_eq!(c.iter().map(|x| x.select).collect::<Vec<_>>(), [true, true, false, true, true]);
        assert_eq!(c[3].source, ClassSource::Raw);
        assert_eq!(all.texts[&c[3].id], "select 'open");
        assert_eq!(all.texts[&c[0].id], "select a from t where x = ?");
        assert_eq!(all.texts.len(), 4);
        assert_ne!(c[3].id, c[0].id);
        let h = classify(&texts[..2], Some(&[Some("abc"), None]), Dialect::Redshift);
        assert_eq!(h.rows[0].id, class_of_hash("abc").id);
        assert_eq!(h.rows[1].id, c[1].id);
        assert_eq!(h.texts[&h.rows[0].id], "select a from t where x = ?");
    }

    #[test]
    fn featurize_prefers_plans_and_falls_back() {
        let classes = vec![
            ClassInput { sql: Some("select * from t".into()), plan: PlanInput::Text("XN Seq Scan on t  (cost=0.00..1.00 rows=100 width=4)".into()), executions: 5.0 },
            ClassInput { sql: Some("select * from u join t on u.k = t.k".into()), plan: PlanInput::None, executions: 1.0 },
            ClassInput { sql: Some("select * from".into()), plan: PlanInput::Json("{".into()), executions: 1.0 },
            ClassInput { sql: Some("select * from v".into()), plan: PlanInput::Text("garbage".into()), executions: 1.0 },
        ];
        let f = featurize(&classes, Dialect::Redshift);
        assert_eq!(f.sources, [FeatureSource::Plan, FeatureSource::Sql, FeatureSource::Fallback, FeatureSource::Sql]);
        // Fitted on the plan-backed class only.
        assert_eq!(f.schema.operators, ["seq_scan"]);
        assert_eq!(f.schema.tables, ["t"]);
        assert_eq!(f.vectors[0][0], 1.0);
        assert!(f.vectors[2].iter().all(|&x| x == 0.0));
        assert!(f.problems[0].is_none() && f.problems[1].is_none());
        assert!(f.problems[2].as_deref().unwrap().contains("not JSON"));
        assert!(f.problems[3].as_deref().unwrap().contains("cost"));
    }
}
