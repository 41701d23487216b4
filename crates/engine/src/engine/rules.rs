//! The optimizer rules an engine's sessions plan with: DataFusion's, with
//! tablesql's own placed among them.

use super::*;

/// DataFusion's optimizer rules, with [`ExtractSubqueries`] around its
/// decorrelation rules: before them the subqueries they fail on, after
/// them what they leave, before projections are pruned.
pub(super) fn optimizer_rules() -> Vec<Arc<dyn OptimizerRule + Send + Sync>> {
    let mut rules = Optimizer::new().rules;
    let position = |rules: &[Arc<dyn OptimizerRule + Send + Sync>], name: &str| {
        rules.iter().position(|r| r.name() == name)
    };
    let after = position(&rules, "decorrelate_lateral_join").map_or(rules.len(), |i| i + 1);
    rules.insert(after, Arc::new(ExtractSubqueries::Rest));
    let before = position(&rules, "decorrelate_predicate_subquery").unwrap_or(0);
    rules.insert(before, Arc::new(ExtractSubqueries::Deep));
    rules
}

/// DataFusion's physical optimizer rules, with [`LookupJoins`] right after
/// its join selection (so that the distribution and sorting it enforces
/// next see the lookup joins), and [`YieldingJoins`] last.
pub(super) fn physical_optimizer_rules() -> Vec<Arc<dyn PhysicalOptimizerRule + Send + Sync>> {
    let mut rules = PhysicalOptimizer::new().rules;
    let after = rules
        .iter()
        .position(|r| r.name() == "join_selection")
        .map_or(0, |i| i + 1);
    rules.insert(after, Arc::new(LookupJoins));
    rules.push(Arc::new(YieldingJoins));
    rules
}
