//! SLO policy per (tenant tier, workload class): a deadline per class as the multi-tenant case
//! decomposes it, overridable per template (optionally per tier). Tenants map to tiers by name;
//! a tenant not listed is in `default_tier`. A query no rule covers keeps the SLO it came with.
//! Part of the execution configuration (`slo_policy`), validated on load.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::catalog;
use crate::error::{AutoSloError, Result};
use crate::workload::{Query, Workload};

/// The deadline of `class` for `tier` (`*`: any tier).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeadlineRule {
    pub tier: String,
    pub class: String,
    pub deadline_s: f64,
}

/// A per-template deadline, for one tier or (without `tier`) every tier.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TemplateRule {
    pub template: u16,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    pub deadline_s: f64,
}

/// Deadlines by (tier, class), with per-template overrides.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SloPolicy {
    /// Tenant name → tier.
    #[serde(default)]
    pub tiers: BTreeMap<String, String>,
    #[serde(default = "standard")]
    pub default_tier: String,
    #[serde(default)]
    pub deadlines: Vec<DeadlineRule>,
    #[serde(default)]
    pub templates: Vec<TemplateRule>,
}

fn standard() -> String {
    "standard".into()
}

impl SloPolicy {
    /// Check every rule; errors name the rule.
    pub fn validated(self) -> Result<Self> {
        let bad = |what: String, got: f64| AutoSloError::out_of_range(what, "a finite deadline > 0 s", got);
        let mut seen = BTreeSet::new();
        for (i, r) in self.deadlines.iter().enumerate() {
            if !(r.deadline_s.is_finite() && r.deadline_s > 0.0) {
                return Err(bad(format!("slo_policy.deadlines[{i}].deadline_s"), r.deadline_s));
            }
            if r.tier.is_empty() || r.class.is_empty() {
                return Err(AutoSloError::InvalidConfig(format!("slo_policy.deadlines[{i}]: tier and class must be named (`*` for any tier)")));
            }
            if !seen.insert((r.tier.as_str(), r.class.as_str())) {
                return Err(AutoSloError::InvalidConfig(format!("slo_policy.deadlines[{i}]: a second rule for tier `{}` and class `{}`", r.tier, r.class)));
            }
        }
        let mut seen = BTreeSet::new();
        for (i, r) in self.templates.iter().enumerate() {
            if !(r.deadline_s.is_finite() && r.deadline_s > 0.0) {
                return Err(bad(format!("slo_policy.templates[{i}].deadline_s"), r.deadline_s));
            }
            if !catalog::tpcds().knows_template(r.template) {
                return Err(AutoSloError::UnknownTemplate { template: i64::from(r.template) });
            }
            if !seen.insert((r.template, r.tier.as_deref())) {
                return Err(AutoSloError::InvalidConfig(format!("slo_policy.templates[{i}]: a second rule for template {}", r.template)));
            }
        }
        Ok(self)
    }

    /// The tier of a tenant.
    pub fn tier_of(&self, tenant: &str) -> &str {
        self.tiers.get(tenant).map_or(self.default_tier.as_str(), String::as_str)
    }

    /// The deadline the policy sets for a query of `tenant` and `class` running `template`, if any
    /// rule covers it: a template rule for the tier, then one for every tier, then the (tier,
    /// class) rule, then the (`*`, class) rule.
    pub fn deadline(&self, tenant: &str, class: &str, template: u16) -> Option<f64> {
        let tier = self.tier_of(tenant);
        let t = |want: Option<&str>| self.templates.iter().find(|r| r.template == template && r.tier.as_deref() == want).map(|r| r.deadline_s);
        let c = |want: &str| self.deadlines.iter().find(|r| r.tier == want && r.class == class).map(|r| r.deadline_s);
        t(Some(tier)).or_else(|| t(None)).or_else(|| c(tier)).or_else(|| c("*"))
    }

    /// `workload` with each query's SLO set by the policy (queries no rule covers keep theirs).
    pub fn apply(&self, workload: &Workload) -> Result<Workload> {
        let queries: Vec<Query> = workload
            .queries()
            .iter()
            .map(|q| Query { slo: self.deadline(workload.tenant_name(q), workload.class_name(q), q.text.template).unwrap_or(q.slo), ..*q })
            .collect();
        Workload::new(queries, workload.tenants().to_vec(), workload.classes().to_vec())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy() -> SloPolicy {
        serde_json::from_str(
            r#"{"tiers": {"aster": "premium"}, "deadlines": [{"tier": "premium", "class": "dashboard", "deadline_s": 2}, {"tier": "*", "class": "dashboard", "deadline_s": 5}, {"tier": "*", "class": "adhoc", "deadline_s": 30}],
                "templates": [{"template": 72, "deadline_s": 60}, {"template": 72, "tier": "premium", "deadline_s": 40}]}"#,
        )
        .unwrap()
    }

    #[test]
    fn rules_apply_from_the_most_specific() {
        let p = policy().validated().unwrap();
        assert_eq!(p.tier_of("aster"), "premium");
        assert_eq!(p.tier_of("cedar"), "standard");
        assert_eq!(p.deadline("aster", "dashboard", 3), Some(2.0));
        assert_eq!(p.deadline("cedar", "dashboard", 3), Some(5.0));
        assert_eq!(p.deadline("cedar", "adhoc", 72), Some(60.0));
        assert_eq!(p.deadline("aster", "adhoc", 72), Some(40.0));
        assert_eq!(p.deadline("cedar", "report", 3), None);
    }

    #[test]
    fn bad_policies_are_named_errors() {
        let dup = SloPolicy { deadlines: vec![DeadlineRule { tier: "*".into(), class: "adhoc".into(), deadline_s: 1.0 }; 2], ..policy() };
        assert!(dup.validated().unwrap_err().to_string().contains("a second rule for tier `*` and class `adhoc`"));
        let neg = SloPolicy { templates: vec![TemplateRule { template: 5, tier: None, deadline_s: -1.0 }], ..policy() };
        assert!(neg.validated().unwrap_err().to_string().contains("slo_policy.templates[0].deadline_s"));
        let unknown = SloPolicy { templates: vec![TemplateRule { template: 500, tier: None, deadline_s: 1.0 }], ..policy() };
        assert!(unknown.validated().is_err());
        assert!(serde_json::from_str::<SloPolicy>(r#"{"deadlnes": []}"#).is_err());
    }
}
