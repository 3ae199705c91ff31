"""Pure pandas transforms from report dicts / frames to the tables the pages show (no Streamlit here).

Every function tolerates missing report sections (returns an empty frame with the expected columns). One module per
page (``leaderboard``, ``preferences``, ``bias``, ``agreement``, ``disagreements``, ``compare``, ``facts``), the
item-level frames several pages share (``items``), all built on ``frames``; this package re-exports their names, so
a page reads ``analysis.scores_frame(report)`` wherever the function lives.
"""

from __future__ import annotations

from dashboard.analysis.agreement import (
    JUDGES_HUMAN_COLUMNS,
    alpha_frame,
    inter_judge_frame,
    judge_sets_frame,
    judges_human_frame,
    pref_agreement_frame,
    pref_confusions,
    score_agreement_frame,
)
from dashboard.analysis.bias import (
    bias_frame,
    flags_frame,
)
from dashboard.analysis.compare import (
    comparable,
    compare_preferences,
    compare_scores,
    default_pair,
    worse_items,
)
from dashboard.analysis.disagreements import (
    ORDER_COLUMNS,
    OUTCOME_VALUE,
    first_with_content,
    flip_summary,
    order_outcomes,
    preference_disagreements,
)
from dashboard.analysis.facts import (
    FACT_COLORS,
    SOURCE_KINDS,
    contradiction_counts,
    escape_markdown,
    evidence_span,
    fact_rates_frame,
    highlight_evidence,
    source_kind,
)
from dashboard.analysis.frames import (
    PAPER_ASPECTS,
    aspect_order,
    frame,
    pair_label,
    section_list,
)
from dashboard.analysis.items import (
    JUDGE_ITEM_COLUMNS,
    bins,
    gap_summary,
    human_item_scores,
    item_score_bars,
    judge_item_scores,
    scatter_frame,
    score_confusion,
    system_ranks,
    to_unit,
)
from dashboard.analysis.leaderboard import (
    METRIC_LABELS,
    PANEL,
    RANK_COLUMNS,
    REFERENCE,
    SCORE_COLUMNS,
    components_text,
    histogram_frame,
    judges_of,
    paired_frame,
    panel_coverage_text,
    paper_frame,
    ranking_frame,
    reference_frame,
    scores_frame,
)
from dashboard.analysis.preferences import (
    PREF_COLUMNS,
    orient,
    preferences_frame,
    winrate_matrix,
    wtl_long,
)

__all__ = [
    "FACT_COLORS",
    "JUDGES_HUMAN_COLUMNS",
    "JUDGE_ITEM_COLUMNS",
    "METRIC_LABELS",
    "ORDER_COLUMNS",
    "OUTCOME_VALUE",
    "PANEL",
    "PAPER_ASPECTS",
    "PREF_COLUMNS",
    "RANK_COLUMNS",
    "REFERENCE",
    "SCORE_COLUMNS",
    "SOURCE_KINDS",
    "alpha_frame",
    "aspect_order",
    "bias_frame",
    "bins",
    "comparable",
    "compare_preferences",
    "compare_scores",
    "components_text",
    "contradiction_counts",
    "default_pair",
    "escape_markdown",
    "evidence_span",
    "fact_rates_frame",
    "first_with_content",
    "flags_frame",
    "flip_summary",
    "frame",
    "gap_summary",
    "highlight_evidence",
    "histogram_frame",
    "human_item_scores",
    "inter_judge_frame",
    "item_score_bars",
    "judge_item_scores",
    "judge_sets_frame",
    "judges_human_frame",
    "judges_of",
    "order_outcomes",
    "orient",
    "pair_label",
    "paired_frame",
    "panel_coverage_text",
    "paper_frame",
    "pref_agreement_frame",
    "pref_confusions",
    "preference_disagreements",
    "preferences_frame",
    "ranking_frame",
    "reference_frame",
    "scatter_frame",
    "score_agreement_frame",
    "score_confusion",
    "scores_frame",
    "section_list",
    "source_kind",
    "system_ranks",
    "to_unit",
    "winrate_matrix",
    "worse_items",
    "wtl_long",
]
