"""Statistics library of dialogue-judge: pure functions over the judgments / human ratings frames.

The frames are described in ``docs/data-contract.md``.  Modules (each documents its conventions):

* ``frames``       column names, validation, empty frames, JSON helpers
* ``bootstrap``    seeded percentile bootstrap (index matrices / exact multinomial shortcut)
* ``scores``       single-mode summaries, paired comparisons (bootstrap + Wilcoxon), the paper table
* ``preferences``  combining presentation orders (FastChat rule), win / tie / loss rates, Wilson CI
* ``ranking``      Bradley-Terry strengths (MM algorithm) with item-bootstrap CIs, Elo-like scale
* ``krippendorff`` Krippendorff's alpha from the coincidence matrix
* ``agreement``    judge vs human / human vs human agreement (FastChat S1/S2, kappa, correlations, QWK)
* ``bias``         position / swap / length / scale-use / failure / self-preference diagnostics + flags
* ``mtbench``      loaders for the MT-Bench human-judgment files, the exact FastChat agreement table
* ``report``       ``build_report``: every statistic of a run as one JSON-serialisable dict
* ``render``       the report as Markdown / plain-text tables for the CLI (imports ``report``, never the reverse)
* ``synthetic``    synthetic judgments frames with planted effects (tests, benchmarks, demos)
* ``compare``      two runs of the same items: score deltas with a paired bootstrap over items, worse items
"""

from judge_api.stats.agreement import (
    canonical_votes,
    cohen_kappa,
    correlations,
    human_human_agreement,
    judge_human_agreement,
    preference_agreement,
    quadratic_weighted_kappa,
    score_agreement,
    score_alpha,
    to_bins,
    to_unit,
    votes_from_judgments,
)
from judge_api.stats.bias import (
    DEFAULT_FAMILIES,
    BiasThresholds,
    bias_flags,
    bias_report,
    model_family,
)
from judge_api.stats.bootstrap import bootstrap_mean_ci, bootstrap_means, percentile_ci, rng_for
from judge_api.stats.frames import (
    empty_judgments,
    empty_ratings,
    jsonable,
    validate_judgments,
    validate_ratings,
)
from judge_api.stats.krippendorff import krippendorff_alpha, krippendorff_alpha_long
from judge_api.stats.mtbench import (
    load_mtbench_folder,
    load_mtbench_gpt4_pair,
    load_mtbench_gpt4_pair_judgments,
    load_mtbench_human,
    mtbench_agreement,
)
from judge_api.stats.preferences import (
    combine_orders,
    orient_combined,
    orient_pair,
    outcome_rates,
    preference_summary,
    summarise_combined,
    wilson_interval,
)
from judge_api.stats.ranking import bradley_terry, fit_bradley_terry, to_elo
from judge_api.stats.render import agreement_to_table, report_to_markdown, report_to_table
from judge_api.stats.report import build_report
from judge_api.stats.scores import (
    item_scores,
    paired_comparison,
    paired_comparisons,
    paper_table,
    score_summary,
    status_counts,
    wilcoxon_p,
)
from judge_api.stats.synthetic import synthetic_judgments

__all__ = [
    "DEFAULT_FAMILIES",
    "BiasThresholds",
    "agreement_to_table",
    "bias_flags",
    "bias_report",
    "bootstrap_mean_ci",
    "bootstrap_means",
    "bradley_terry",
    "build_report",
    "canonical_votes",
    "cohen_kappa",
    "combine_orders",
    "correlations",
    "empty_judgments",
    "empty_ratings",
    "fit_bradley_terry",
    "human_human_agreement",
    "item_scores",
    "jsonable",
    "judge_human_agreement",
    "krippendorff_alpha",
    "krippendorff_alpha_long",
    "load_mtbench_folder",
    "load_mtbench_gpt4_pair",
    "load_mtbench_gpt4_pair_judgments",
    "load_mtbench_human",
    "model_family",
    "mtbench_agreement",
    "orient_combined",
    "orient_pair",
    "outcome_rates",
    "paired_comparison",
    "paired_comparisons",
    "paper_table",
    "percentile_ci",
    "preference_agreement",
    "preference_summary",
    "quadratic_weighted_kappa",
    "report_to_markdown",
    "report_to_table",
    "rng_for",
    "score_agreement",
    "score_alpha",
    "score_summary",
    "status_counts",
    "summarise_combined",
    "synthetic_judgments",
    "to_bins",
    "to_elo",
    "to_unit",
    "validate_judgments",
    "validate_ratings",
    "votes_from_judgments",
    "wilcoxon_p",
    "wilson_interval",
]
