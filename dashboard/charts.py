"""Pure chart builders: DataFrames (from ``analysis``) in, Altair charts out.

No Streamlit here, so every chart can be unit-tested by checking its spec. Charts are built from aggregated
report data (one row per system x aspect, pair, judge...), never from raw judgment rows, so they stay small
for runs of any size; the two item-level charts (scatter) take a sample capped at ``MAX_POINTS``.
"""

from __future__ import annotations

from collections.abc import Sequence

import altair as alt
import pandas as pd

AltairChart = alt.Chart | alt.LayerChart | alt.FacetChart | alt.ConcatChart | alt.HConcatChart | alt.VConcatChart
OUTCOME_COLORS = {"win": "#2e7d32", "tie": "#b0bec5", "loss": "#c62828"}
MAX_POINTS = 5000
COUNT_AXIS = alt.Axis(tickMinStep=1, format="d")  # counts: whole ticks (never 0.5, 1.5)
HEIGHT_PER_ROW = 34


def _height(n_rows: int, minimum: int = 160, per_row: int = HEIGHT_PER_ROW) -> int:
    return max(minimum, per_row * n_rows + 60)


def short_judge(spec: object) -> str:
    """``provider:model@http://host/v1`` -> ``provider:model`` (the endpoint stays in tooltips and tables)."""
    return str(spec).split("@", 1)[0]


def with_interval_text(df: pd.DataFrame, digits: int, low: str = "ci_low", high: str = "ci_high") -> pd.DataFrame:
    """``df`` with ``interval``: the 95% CI in words for tooltips, or why there is none (the report's ``ci_warning``,
    else "no interval"); a tooltip of the bare bounds read "null" where the report gives no interval."""
    lows = pd.to_numeric(df[low], errors="coerce") if low in df else pd.Series(float("nan"), index=df.index)
    highs = pd.to_numeric(df[high], errors="coerce") if high in df else pd.Series(float("nan"), index=df.index)
    warnings = df["ci_warning"] if "ci_warning" in df else pd.Series(None, index=df.index, dtype=object)
    words = []
    for lo, hi, warning in zip(lows, highs, warnings, strict=True):
        if pd.isna(lo) or pd.isna(hi):
            words.append(str(warning) if isinstance(warning, str) and warning else "no interval")
        else:
            words.append(f"{lo:.{digits}f} to {hi:.{digits}f}")
    return df.assign(interval=words)


def score_means_chart(
    scores: pd.DataFrame,
    aspects: Sequence[str] | None = None,
    *,
    domain: tuple[float, float] | None = None,
    title: str = "mean score",
) -> AltairChart:
    """Grouped bars of the mean score per system x aspect with 95% CI error bars (on ``domain`` when given: the
    reference metrics' 0-1)."""
    df = with_interval_text(scores.dropna(subset=["mean"]), 1)
    order = list(aspects) if aspects else sorted(df["aspect"].dropna().unique())
    systems = df.groupby("system")["mean"].mean().sort_values(ascending=False).index.tolist()
    base = alt.Chart(df).encode(
        x=alt.X("system:N", title=None, sort=systems, axis=alt.Axis(labelAngle=0)),
        xOffset=alt.XOffset("aspect:N", sort=order),
    )
    tooltip = [
        "system:N",
        "aspect:N",
        alt.Tooltip("mean:Q", format=".1f"),
        alt.Tooltip("interval:N", title="95% CI"),
        "n:Q",
    ]
    bars = base.mark_bar(opacity=0.85).encode(
        y=alt.Y("mean:Q", title=title, scale=alt.Scale(domain=list(domain)) if domain else alt.Undefined),
        color=alt.Color("aspect:N", sort=order, title="aspect"),
        tooltip=tooltip,
    )
    errors = base.mark_rule(color="black", strokeWidth=1.5).encode(y="ci_low:Q", y2="ci_high:Q")
    return alt.layer(bars, errors).properties(height=340)


UNBOUNDED_LABELS = {"high": "no upper bound →", "low": "← no lower bound"}


def ranking_frame_drawn(ranking: pd.DataFrame) -> pd.DataFrame:
    """The ranking as drawn: a side the report leaves open (``ci_unbounded``: the system won or lost every
    comparison) reaches the axis' edge (``drawn_low`` / ``drawn_high``) and is labelled, never dropped; ``interval``
    is the report's interval in words."""
    df = ranking.dropna(subset=["elo"]).copy()
    low = pd.to_numeric(df["elo_ci_low"], errors="coerce").astype(float)
    high = pd.to_numeric(df["elo_ci_high"], errors="coerce").astype(float)
    elo = pd.to_numeric(df["elo"], errors="coerce").astype(float)
    finite = pd.concat([low, high, elo]).dropna()
    pad = max(50.0, 0.15 * float(finite.max() - finite.min())) if len(finite) else 50.0
    edge_low, edge_high = (float(finite.min()) - pad, float(finite.max()) + pad) if len(finite) else (0.0, 2000.0)
    unbounded = df["ci_unbounded"] if "ci_unbounded" in df else pd.Series(None, index=df.index, dtype=object)
    df["drawn_low"] = low.mask(unbounded.isin(["low", "both"]), edge_low)
    df["drawn_high"] = high.mask(unbounded.isin(["high", "both"]), edge_high)
    df["unbounded_label"] = unbounded.map(UNBOUNDED_LABELS).fillna("")
    df["label_at"] = (df["drawn_low"] + df["drawn_high"]) / 2

    def words(lo: float, hi: float) -> str:
        if pd.isna(lo) and pd.isna(hi):
            return "no interval"
        return f"{'−∞' if pd.isna(lo) else f'{lo:.0f}'} to {'+∞' if pd.isna(hi) else f'{hi:.0f}'}"

    df["interval"] = [words(lo, hi) for lo, hi in zip(low, high, strict=True)]
    df.attrs["domain"] = (edge_low, edge_high)
    return df


def ranking_chart(ranking: pd.DataFrame) -> AltairChart:
    """Bradley-Terry Elo-scale strength per system with its bootstrap CI, best on top; an interval with no upper
    (lower) bound runs to the axis' edge and says so."""
    df = ranking_frame_drawn(ranking)
    order = df.sort_values("elo", ascending=False)["system"].drop_duplicates().tolist()
    base = alt.Chart(df).encode(y=alt.Y("system:N", sort=order, title=None))
    tooltip = [
        "rank:Q",
        "system:N",
        alt.Tooltip("elo:Q", format=".0f"),
        alt.Tooltip("interval:N", title="95% CI"),
        "n_comparisons:Q",
    ]
    x_scale = alt.Scale(zero=False, domain=list(df.attrs["domain"]), nice=False)
    rules = base.mark_rule(strokeWidth=2, color="#546e7a").encode(
        x=alt.X("drawn_low:Q", title="Bradley-Terry strength (Elo scale, 95% CI)", scale=x_scale),
        x2="drawn_high:Q",
        tooltip=tooltip,
    )
    points = base.mark_point(filled=True, size=120, color="#1565c0").encode(
        x=alt.X("elo:Q", scale=x_scale), tooltip=tooltip
    )
    labels = (
        base.transform_filter(alt.datum.unbounded_label != "")
        .mark_text(dy=-12, fontSize=11, color="#546e7a")
        .encode(x=alt.X("label_at:Q", scale=x_scale), text="unbounded_label:N")
    )
    return alt.layer(rules, points, labels).properties(height=_height(len(order), per_row=56))


def histogram_chart(hist: pd.DataFrame) -> AltairChart:
    """Score distribution (the report's histogram bins) per system, one small panel per aspect."""
    df = hist.copy()
    df["bin"] = (
        df["bin_start"].round(0).astype("Int64").astype(str) + "–" + df["bin_end"].round(0).astype("Int64").astype(str)
    )
    return (
        alt.Chart(df)
        .mark_bar()
        .encode(
            x=alt.X("bin:N", sort=alt.SortField("bin_start"), title="score bin"),
            y=alt.Y("sum(count):Q", title="items", axis=COUNT_AXIS),
            color=alt.Color("system:N"),
            xOffset="system:N",
            column=alt.Column("aspect:N", title=None),
            tooltip=["system:N", "aspect:N", "bin:N", "sum(count):Q"],
        )
        .properties(width=260, height=180)
    )


def _stack_columns(df: pd.DataFrame, value: str, group: str | None = None) -> pd.DataFrame:
    """``df`` (rows already in stacking order) with ``start`` / ``end`` / ``mid`` of each segment along ``value``,
    stacked from 0 within ``group`` (the whole frame when None): the bars span start-end, their text sits at mid."""
    values = df[value].astype(float)
    end = values.groupby(df[group]).cumsum() if group else values.cumsum()
    return df.assign(start=end - values, end=end, mid=end - values / 2)


def wtl_figure(wtl: pd.DataFrame, title: str | None = None) -> AltairChart:
    """The seed paper's figure 4: stacked horizontal win / tie / loss bars (percent) per system pair, pairs in their
    given order top to bottom, the percent written inside a segment of 4 % or more."""
    outcomes = list(OUTCOME_COLORS)
    pairs = list(dict.fromkeys(wtl["pair"].tolist()))
    full = pd.MultiIndex.from_product([pairs, outcomes], names=["pair", "outcome"])
    df = (
        wtl.drop_duplicates(["pair", "outcome"])
        .set_index(["pair", "outcome"])[["pct", "count"]]
        .reindex(full)
        .reset_index()
    )
    df["pct"] = df["pct"].fillna(0.0).astype(float)
    df["count"] = df["count"].fillna(0).astype(int)
    df["rank"] = df["outcome"].map(outcomes.index)
    df["label"] = [f"{v:.1f}%" if v >= 4 else "" for v in df["pct"]]
    df = _stack_columns(df, "pct", "pair")
    y = alt.Y("pair:N", sort=pairs, title=None, axis=alt.Axis(labelLimit=260))
    x_scale = alt.Scale(domain=[0, 100], nice=False)
    tooltip = [
        "pair:N",
        "outcome:N",
        alt.Tooltip("pct:Q", format=".1f", title="%"),
        alt.Tooltip("count:Q", format=",d"),
    ]
    bars = (
        alt.Chart(df)
        .mark_bar()
        .encode(
            x=alt.X(
                "start:Q",
                title="% of comparisons",
                scale=x_scale,
                axis=alt.Axis(values=[0, 20, 40, 60, 80, 100], labelExpr="datum.value + '%'"),
            ),
            x2="end:Q",
            y=y,
            color=alt.Color(
                "outcome:N",
                sort=outcomes,
                scale=alt.Scale(domain=outcomes, range=[OUTCOME_COLORS[o] for o in outcomes]),
                legend=alt.Legend(orient="top", title=None),
            ),
            tooltip=tooltip,
        )
    )
    text = (
        alt.Chart(df)
        .transform_filter(alt.datum.label != "")
        .mark_text(color="white", fontWeight="bold")
        .encode(x=alt.X("mid:Q", scale=x_scale), y=y, text="label:N", tooltip=tooltip)
    )
    chart = alt.layer(bars, text).properties(height=_height(len(pairs), per_row=44))
    return chart.properties(title=title) if title else chart


def winrate_heatmap(matrix: pd.DataFrame) -> AltairChart:
    """Row system's win rate ((W + T/2) / N) over the column system; blank cells are pairs never compared."""
    systems = sorted(set(matrix["row"]) | set(matrix["column"]))
    cells = (
        matrix.groupby(["row", "column"])
        .agg(win_rate=("win_rate", "mean"), n=("n", "sum"))
        .reindex(pd.MultiIndex.from_product([systems, systems], names=["row", "column"]))
        .reset_index()
    )
    cells["label"] = ["" if pd.isna(v) else f"{v:.2f}" for v in cells["win_rate"]]
    compared = cells.dropna(subset=["win_rate"])
    x = alt.X("column:N", title="opponent", sort=systems, scale=alt.Scale(domain=systems), axis=alt.Axis(labelAngle=0))
    y = alt.Y("row:N", title="system", sort=systems, scale=alt.Scale(domain=systems))
    tooltip = [
        alt.Tooltip("row:N", title="system"),
        alt.Tooltip("column:N", title="opponent"),
        alt.Tooltip("win_rate:Q", format=".3f", title="win rate"),
        "n:Q",
    ]
    heat = (
        alt.Chart(compared)
        .mark_rect()
        .encode(
            x=x,
            y=y,
            color=alt.Color(
                "win_rate:Q",
                title="win rate",
                scale=alt.Scale(scheme="redblue", domain=[0, 1]),
            ),
            tooltip=tooltip,
        )
    )
    extreme = (alt.datum.win_rate < 0.2) | (alt.datum.win_rate > 0.8)
    text = (
        alt.Chart(compared)
        .mark_text(fontSize=13)
        .encode(
            x=x,
            y=y,
            text="label:N",
            color=alt.condition(extreme, alt.value("white"), alt.value("black")),
            tooltip=tooltip,
        )
    )
    return alt.layer(heat, text).properties(height=max(200, 60 * len(systems) + 40))


def agreement_scatter(scatter: pd.DataFrame) -> AltairChart:
    """Judge score vs mean human score (both on 0-1) per rated (item, system, aspect), with the y = x line."""
    df = scatter.head(MAX_POINTS) if len(scatter) > MAX_POINTS else scatter
    points = (
        alt.Chart(df)
        .mark_circle(size=70, opacity=0.7)
        .encode(
            x=alt.X("human_unit:Q", title="human score (0–1 of its scale)", scale=alt.Scale(domain=[0, 1])),
            y=alt.Y("judge_unit:Q", title="judge score (0–1 of its scale)", scale=alt.Scale(domain=[0, 1])),
            color=alt.Color("system:N"),
            tooltip=[
                "item_id:N",
                "system:N",
                "aspect:N",
                "judge:N",
                alt.Tooltip("score:Q", format=".1f"),
                alt.Tooltip("human:Q", format=".1f"),
                "n_raters:Q",
            ],
        )
    )
    diagonal = (
        alt.Chart(pd.DataFrame({"x": [0.0, 1.0], "y": [0.0, 1.0]}))
        .mark_line(strokeDash=[4, 4], color="gray")
        .encode(x="x:Q", y="y:Q")
    )
    return alt.layer(diagonal, points).properties(height=360)


def confusion_heatmap(
    matrix: Sequence[Sequence[float]],
    labels: Sequence[str],
    *,
    row_title: str = "judge",
    column_title: str = "human",
) -> AltairChart:
    """Counts heatmap with the numbers written in (rows: ``row_title``, columns: ``column_title``)."""
    rows = [
        {row_title: labels[i], column_title: labels[j], "count": float(v)}
        for i, line in enumerate(matrix)
        for j, v in enumerate(line)
    ]
    df = pd.DataFrame(rows, columns=[row_title, column_title, "count"])
    order = list(labels)
    base = alt.Chart(df).encode(
        x=alt.X(f"{column_title}:N", sort=order, axis=alt.Axis(labelAngle=0, orient="top", labelOverlap=False)),
        y=alt.Y(f"{row_title}:N", sort=order),
    )
    heat = base.mark_rect().encode(
        color=alt.Color("count:Q", scale=alt.Scale(scheme="blues"), legend=None),
        tooltip=[f"{row_title}:N", f"{column_title}:N", "count:Q"],
    )
    text = base.mark_text(fontSize=13).encode(text=alt.Text("count:Q", format=".0f"), color=alt.value("black"))
    size = 64 * len(order) + 50
    return alt.layer(heat, text).properties(width=size, height=size)


def rank_comparison_chart(ranks: pd.DataFrame) -> AltairChart:
    """Slope chart: each system's rank by the judge (left) and the humans (right); crossings disagree."""
    long = ranks.melt(id_vars=["system"], value_vars=["judge_rank", "human_rank"], var_name="by", value_name="rank")
    long["by"] = long["by"].map({"judge_rank": "judge", "human_rank": "humans"})
    base = alt.Chart(long).encode(
        x=alt.X("by:N", sort=["judge", "humans"], title=None, axis=alt.Axis(labelAngle=0)),
        y=alt.Y(
            "rank:Q",
            scale=alt.Scale(reverse=True, zero=False),
            title="rank (1 = best)",
            axis=alt.Axis(tickMinStep=1),
        ),
        color=alt.Color("system:N"),
    )
    lines = base.mark_line(point=alt.OverlayMarkDef(size=80)).encode(
        detail="system:N", tooltip=["system:N", "by:N", "rank:Q"]
    )
    labels = base.transform_filter(alt.datum.by == "humans").mark_text(align="left", dx=8).encode(text="system:N")
    return alt.layer(lines, labels).properties(height=max(200, 40 * ranks["system"].nunique() + 80))


def rate_bars(
    bias: pd.DataFrame,
    column: str,
    title: str,
    *,
    reference: float = 0.5,
    band: float | None = None,
    domain: tuple[float, float] = (0.0, 1.0),
) -> AltairChart:
    """One bar per judge of a rate (default in [0, 1]) with its value written, a dashed reference line and
    an optional shaded band of tolerated values around the reference."""
    df = bias.dropna(subset=[column]).copy()
    df["judge_label"] = df["judge"].map(short_judge)
    df["value_label"] = df[column].map(lambda v: f"{float(v):.2f}")
    y = alt.Y("judge_label:N", title=None, axis=alt.Axis(labelLimit=220))
    layers: list[alt.Chart] = []
    if band is not None:
        band_df = pd.DataFrame({"lo": [max(domain[0], reference - band)], "hi": [min(domain[1], reference + band)]})
        layers.append(alt.Chart(band_df).mark_rect(opacity=0.15, color="#2e7d32").encode(x="lo:Q", x2="hi:Q"))
    bars = alt.Chart(df).encode(
        x=alt.X(f"{column}:Q", title=title, scale=alt.Scale(domain=list(domain))),
        y=y,
        tooltip=["judge:N", alt.Tooltip(f"{column}:Q", format=".3f")],
    )
    layers.append(bars.mark_bar(color="#5c6bc0", height=22))
    layers.append(bars.mark_text(align="left", dx=6, fontSize=13).encode(text="value_label:N"))
    layers.append(
        alt.Chart(pd.DataFrame({"ref": [reference]})).mark_rule(strokeDash=[5, 4], color="black").encode(x="ref:Q")
    )
    return alt.layer(*layers).properties(height=_height(len(df), minimum=110, per_row=44))


def delta_chart(deltas: pd.DataFrame) -> AltairChart:
    """Candidate - baseline mean per system x aspect with its paired-bootstrap CI; zero marked."""
    df = with_interval_text(deltas, 2)
    df["label"] = df["system"].astype(str) + " · " + df["aspect"].astype(str)
    df["direction"] = df["delta"].map(lambda d: "better" if d > 0 else "worse" if d < 0 else "same")
    base = alt.Chart(df).encode(y=alt.Y("label:N", title=None, sort=None, axis=alt.Axis(labelLimit=260)))
    rules = base.mark_rule(strokeWidth=2, color="#78909c").encode(
        x=alt.X("ci_low:Q", title="candidate − baseline (mean score, 95% CI)", axis=alt.Axis(format=".2f")),
        x2="ci_high:Q",
    )
    points = base.mark_point(filled=True, size=110).encode(
        x="delta:Q",
        color=alt.Color(
            "direction:N",
            scale=alt.Scale(domain=["better", "same", "worse"], range=["#2e7d32", "#90a4ae", "#c62828"]),
        ),
        tooltip=[
            "system:N",
            "aspect:N",
            alt.Tooltip("baseline:Q", format=".2f"),
            alt.Tooltip("candidate:Q", format=".2f"),
            alt.Tooltip("delta:Q", format=".2f"),
            alt.Tooltip("interval:N", title="95% CI"),
            "n_items:Q",
        ],
    )
    zero = alt.Chart(pd.DataFrame({"zero": [0.0]})).mark_rule(strokeDash=[4, 4], color="black").encode(x="zero:Q")
    return alt.layer(zero, rules, points).properties(height=_height(len(df)))


def gap_chart(gaps: pd.DataFrame) -> AltairChart:
    """Mean judge-human gap per system x aspect (horizontal grouped bars)."""
    return (
        alt.Chart(gaps)
        .mark_bar()
        .encode(
            x=alt.X("mean_gap:Q", title="mean |judge − human| (0–1 scale)", scale=alt.Scale(zero=True)),
            y=alt.Y("system:N", title=None),
            yOffset="aspect:N",
            color=alt.Color("aspect:N"),
            tooltip=["system:N", "aspect:N", alt.Tooltip("mean_gap:Q", format=".3f"), "n:Q"],
        )
        .properties(height=_height(gaps["system"].nunique(), minimum=120, per_row=50))
    )


INTERVAL_COLORS = ["#90a4ae", "#ef6c00", "#1565c0"]  # judge only, human only, calibrated


def calibrated_intervals_chart(
    intervals: pd.DataFrame, kinds: Sequence[str], scale: tuple[float, float] | None, ci_label: str
) -> AltairChart:
    """Per system, the judge-only (mapped), human-only and calibrated intervals on the humans' scale, one above the
    other (``kinds`` in their order)."""
    domain = alt.Scale(domain=list(scale), zero=False, nice=False) if scale else alt.Scale(zero=False)
    base = alt.Chart(intervals).encode(
        y=alt.Y("system:N", title=None, axis=alt.Axis(labelLimit=200)),
        yOffset=alt.YOffset("interval:N", sort=list(kinds)),
        color=alt.Color(
            "interval:N",
            scale=alt.Scale(domain=list(kinds), range=INTERVAL_COLORS[: len(kinds)]),
            legend=alt.Legend(orient="bottom", title=None, labelLimit=0),  # the mapped interval says so in full
        ),
    )
    rules = base.mark_rule(strokeWidth=3).encode(
        x=alt.X("ci_low:Q", title=f"estimate on the humans' scale ({ci_label})", scale=domain), x2="ci_high:Q"
    )
    points = base.mark_point(filled=True, size=90).encode(
        x="estimate:Q",
        tooltip=[
            "system:N",
            "interval:N",
            alt.Tooltip("estimate:Q", format=".3f"),
            alt.Tooltip("ci_low:Q", format=".3f"),
            alt.Tooltip("ci_high:Q", format=".3f"),
            "n:Q",
        ],
    )
    return alt.layer(rules, points).properties(height=_height(intervals["system"].nunique(), per_row=70))


def flip_chart(flips: pd.DataFrame) -> AltairChart:
    """Share of keys whose verdict flips with the presentation order, per pair x aspect."""
    return (
        alt.Chart(flips)
        .mark_bar(color="#ef6c00")
        .encode(
            x=alt.X("flip_rate:Q", title="flip rate", scale=alt.Scale(domain=[0, 1])),
            y=alt.Y("pair:N", title=None),
            yOffset="aspect:N",
            tooltip=["pair:N", "aspect:N", "flips:Q", "n:Q", alt.Tooltip("flip_rate:Q", format=".2f")],
        )
        .properties(height=_height(flips["pair"].nunique(), minimum=110, per_row=40))
    )


STATUS_COLORS = {
    "done": "#2e7d32",
    "running": "#1565c0",
    "pending": "#b0bec5",
    "failed": "#c62828",
    "unparseable": "#ef6c00",
    "cancelled": "#6d4c41",
}


def progress_figure(counts: dict[str, int]) -> AltairChart:
    """One stacked bar of a run's judgments by status (fixed colours and order; a status with no judgment is left
    out). The count is written inside a segment of 4 % of the run or more, and always in the legend and tooltip."""
    rows = [
        {"status": status, "n": int(counts.get(status) or 0)}
        for status in STATUS_COLORS
        if int(counts.get(status) or 0)
    ]
    df = _stack_columns(pd.DataFrame(rows, columns=["status", "n"]), "n")
    total = int(df["n"].sum())
    df["label"] = [f"{n:,d}" if total and n >= 0.04 * total else "" for n in df["n"]]
    present = list(df["status"])
    legend_words = ", ".join(f"'{s}': '{s} ({n:,d})'" for s, n in zip(df["status"], df["n"], strict=True))
    color = alt.Color(
        "status:N",
        sort=present,
        scale=alt.Scale(domain=present, range=[STATUS_COLORS[s] for s in present]),
        legend=alt.Legend(orient="bottom", title=None, labelExpr=f"{{{legend_words}}}[datum.label] || datum.label"),
    )
    x_scale = alt.Scale(domain=[0, max(total, 1)], nice=False)
    axis = alt.Axis(format=",d", tickMinStep=integer_dtick(total))
    tooltip = ["status:N", alt.Tooltip("n:Q", format=",d", title="judgments")]
    bars = (
        alt.Chart(df)
        .mark_bar(height=36)
        .encode(x=alt.X("start:Q", title=None, scale=x_scale, axis=axis), x2="end:Q", color=color, tooltip=tooltip)
    )
    text = (
        alt.Chart(df)
        .transform_filter(alt.datum.label != "")
        .mark_text(color="white", fontWeight="bold")
        .encode(x=alt.X("mid:Q", scale=x_scale), text="label:N", tooltip=tooltip)
    )
    return alt.layer(bars, text).properties(height=100)  # Streamlit fits the legend in the height too


def integer_dtick(largest: int, ticks: int = 8) -> int:
    """A whole tick step for a count axis up to ``largest`` (about ``ticks`` ticks; never a half step)."""
    return max(1, -(-int(largest) // ticks))


def contradiction_chart(counts: pd.DataFrame) -> AltairChart:
    """Contradicted facts per system, stacked by the kind of the fact's source."""
    return (
        alt.Chart(counts)
        .mark_bar()
        .encode(
            x=alt.X("contradictions:Q", title="contradicted facts", axis=COUNT_AXIS),
            y=alt.Y("system:N", title=None),
            color=alt.Color("source_kind:N", title="fact source"),
            tooltip=["system:N", "source_kind:N", "contradictions:Q"],
        )
        .properties(height=_height(counts["system"].nunique(), minimum=110, per_row=40))
    )


NO_INTERVAL = "n too small for an interval"
SLICE_COLOURS = ["#1f77b4", "#2ca02c", "#7f7f7f", "#9467bd", "#8c564b", "#17becf", "#bcbd22", "#e377c2"]
ALERT_COLOUR = "#d62728"


def series_frame(
    rows: pd.DataFrame, slice_by: str, value: str = "mean", scale: tuple[float, float] | None = None
) -> pd.DataFrame:
    """The rows a monitor's series chart draws: ``slice`` named, the interval clipped to the rubric's ``scale`` (a
    t interval of a few verdicts runs far past it) and ``interval`` in words, "n too small for an interval" where
    the API gave none (fewer than 2 verdicts)."""
    df = rows.dropna(subset=[value]).copy()
    df["slice"] = df[slice_by].fillna("(none)").astype(str) if slice_by in df else "(all)"
    if value != "mean":
        return df
    low = pd.to_numeric(df["ci_low"], errors="coerce").astype(float)
    high = pd.to_numeric(df["ci_high"], errors="coerce").astype(float)
    if scale is not None:
        low, high = low.clip(scale[0], scale[1]), high.clip(scale[0], scale[1])
    df["ci_low"], df["ci_high"] = low, high
    has = low.notna() & high.notna()
    df["interval"] = [f"{lo:.1f} to {hi:.1f}" if ok else NO_INTERVAL for lo, hi, ok in zip(low, high, has, strict=True)]
    return df


def series_chart(
    rows: pd.DataFrame,
    slice_by: str,
    value: str = "mean",
    scale: tuple[float, float] | None = None,
    alerting: str | None = None,
) -> AltairChart:
    """A monitor's series: one line per slice (``slice_by``: version, system or segment) over the buckets, each
    bucket's interval a band of the line's colour (drawn per bucket, so a bucket with an interval has its band
    whatever its neighbours have), on the rubric's ``scale``; a bucket too small for an interval is a hollow mark.
    The ``alerting`` slice (the one an open alert is about) is drawn red and bold, the others thinner
    (``value="contradiction_rate"``: the rate on 0-1, no band)."""
    df = series_frame(rows, slice_by, value, scale)
    slices = sorted(df["slice"].unique().tolist())
    others = iter(SLICE_COLOURS * (1 + len(slices) // len(SLICE_COLOURS)))
    palette = [ALERT_COLOUR if s == alerting else next(others) for s in slices]
    title = slice_by + (f" (alert: {alerting})" if alerting in slices else "")
    color = alt.Color("slice:N", title=title, scale=alt.Scale(domain=slices, range=palette))
    emphasis = alt.datum.slice == alerting
    x = alt.X("bucket_start:T", title="bucket (UTC)")
    domain = scale if value == "mean" and scale is not None else (0, 1) if value != "mean" else None
    y_scale = alt.Scale(domain=list(domain)) if domain else alt.Scale(zero=False)
    tooltip = ["bucket_start:T", "slice:N", "n:Q", alt.Tooltip(f"{value}:Q", format=".3f")]
    if value == "mean":
        tooltip.append("interval:N")
    line = (
        alt.Chart(df)
        .mark_line(point=True)
        .encode(
            x=x,
            y=alt.Y(f"{value}:Q", title=value.replace("_", " "), scale=y_scale),
            color=color,
            strokeWidth=alt.condition(emphasis, alt.value(4), alt.value(1.5)) if alerting else alt.value(2),
            opacity=alt.condition(emphasis, alt.value(1.0), alt.value(0.75)) if alerting else alt.value(1.0),
            tooltip=tooltip,
        )
    )
    if value != "mean":
        return line.properties(height=280)
    with_interval = df[df["interval"] != NO_INTERVAL]
    without = df[df["interval"] == NO_INTERVAL]
    bands = (
        alt.Chart(with_interval)
        .mark_rule(strokeWidth=10, strokeCap="butt")
        .encode(
            x=x,
            y=alt.Y("ci_low:Q", scale=y_scale),
            y2="ci_high:Q",
            color=color,
            opacity=alt.condition(emphasis, alt.value(0.4), alt.value(0.2)) if alerting else alt.value(0.25),
            tooltip=tooltip,
        )
    )
    small = (
        alt.Chart(without)
        .mark_point(shape="diamond", filled=False, size=140, strokeWidth=2)
        .encode(x=x, y=alt.Y("mean:Q", scale=y_scale), color=color, tooltip=tooltip)
    )
    return alt.layer(bands, line, small).properties(height=320)


def memory_figures_chart(figures: pd.DataFrame) -> AltairChart:
    """Memory audit: precision, recall and F1 per system (grouped bars, 0-1) with their 95% CI error bars."""
    df = with_interval_text(figures.dropna(subset=["value"]), 3)
    order = ["precision", "recall", "F1"]
    base = alt.Chart(df).encode(
        x=alt.X("system:N", title=None, axis=alt.Axis(labelAngle=0)), xOffset=alt.XOffset("figure:N", sort=order)
    )
    tooltip = [
        "system:N",
        "figure:N",
        alt.Tooltip("value:Q", format=".3f"),
        alt.Tooltip("interval:N", title="95% CI"),
        "n_items:Q",
    ]
    bars = base.mark_bar(opacity=0.85).encode(
        y=alt.Y("value:Q", title="fact level", scale=alt.Scale(domain=[0, 1])),
        color=alt.Color("figure:N", sort=order, title=None),
        tooltip=tooltip,
    )
    errors = base.mark_rule(color="black", strokeWidth=1.5).encode(y="ci_low:Q", y2="ci_high:Q")
    return alt.layer(bars, errors).properties(height=320)


def error_shares_chart(shares: pd.DataFrame) -> AltairChart:
    """Memory audit: each system's errors split by type (stacked shares summing to 1)."""
    order = ["fabricated", "wrong relationship", "missing"]
    return (
        alt.Chart(shares.dropna(subset=["share"]))
        .mark_bar()
        .encode(
            x=alt.X("share:Q", title="share of the system's errors", scale=alt.Scale(domain=[0, 1])),
            y=alt.Y("system:N", title=None),
            color=alt.Color("error_type:N", sort=order, title="error type"),
            order=alt.Order("error_type:N"),
            tooltip=["system:N", "error_type:N", "count:Q", alt.Tooltip("share:Q", format=".3f")],
        )
        .properties(height=_height(shares["system"].nunique(), minimum=110, per_row=40))
    )
