"""Judge bias diagnostics for a run, per judge, and threshold flags.

Figures (each computed per judge over all aspects):

* Position bias: P(the first-shown response wins) over pairwise *order rows* (every sample of every
  order, status done) whose outcome is not a tie.  ``ab`` + win or ``ba`` + loss is a first-position
  win.  Unbiased: 0.5.
* Swap-flip rate: among order-combined keys (item, pair, aspect, judge) judged in both orders, the
  fraction whose two orders disagree (i.e. the FastChat "inconsistent" ties).
* Length bias: P(the longer response wins) among order-combined non-tie outcomes whose two responses
  have different lengths (``len_a`` / ``len_b`` in characters); and the Spearman correlation of
  single-mode scores (done rows) with the judged response's length.  A strong correlation (``|rho|`` above
  ``length_score_spearman_max``) is flagged: LLM judges are known to favour longer answers (AlpacaEval's
  length-controlled win rate, Dubois et al. 2024, was built to correct for it).
* Score-distribution use (single mode, done rows, scores rounded to the scale's integer points):
  fraction of the scale's points used, min / max, quartiles and IQR, and the entropy of the score
  histogram divided by ``log(number of scale points)`` (1 = uniform use of the whole scale).
* Failure and unparseable rates: ``n_failed / n_finished`` and ``n_unparseable / n_finished`` where
  finished = done + failed + unparseable (pending / running rows are not judged yet, cancelled rows
  never will be).
* Self-preference: judge and system families from a substring map (``DEFAULT_FAMILIES``, first match
  wins; for a ``provider:model`` judge spec the model part is matched first, then the whole spec).
  Single mode: mean item score of same-family systems minus others (also as a fraction of the scale
  range).  Pairwise: win rate (W + T/2) / N of the same-family system in pairs where exactly one side
  shares the judge's family.

``BiasThresholds`` holds the flag thresholds; a figure is only flagged when it rests on at least
``min_n`` observations.  Flags are ``{"name", "value", "threshold", "message"}`` dicts.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

import numpy as np
import pandas as pd

from judge_api.stats import frames as F
from judge_api.stats.agreement import spearman
from judge_api.stats.preferences import combine_orders, pairwise_rows
from judge_api.stats.scores import item_scores

DEFAULT_FAMILIES: dict[str, str] = {
    "openai": "openai",
    "chatgpt": "openai",
    "gpt": "openai",
    "claude": "anthropic",
    "anthropic": "anthropic",
    "llama": "meta",
    "mixtral": "mistral",
    "mistral": "mistral",
    "qwen": "qwen",
    "gemma": "google",
    "gemini": "google",
    "smollm": "huggingface",
    "deepseek": "deepseek",
    "phi-": "microsoft",
    "command-r": "cohere",
}


def _threshold(default: float, low: float, high: float | None = None) -> Any:
    """A threshold's default and its allowed range (``high`` None: unbounded)."""
    return field(default=default, metadata={"range": (low, high)})


@dataclass(frozen=True)
class BiasThresholds:
    """Thresholds above which a run's bias figure is flagged. A value out of its range is a ``ValueError`` naming
    the field (plain numbers, so ``judge_api.stats`` stays on numpy, scipy and pandas)."""

    position_bias_max_deviation: float = _threshold(0.1, 0, 0.5)  # |P(first wins) - 0.5|
    swap_flip_rate_max: float = _threshold(0.3, 0, 1)
    length_win_rate_max: float = _threshold(0.7, 0, 1)  # P(longer response wins)
    # |Spearman(single score, response length)|: above it (with min_n scores) the judge's scores follow the
    # response's length (0.5: a strong correlation; at 20 scores p < 0.03)
    length_score_spearman_max: float = _threshold(0.5, 0, 1)
    unparseable_rate_max: float = _threshold(0.05, 0, 1)
    failure_rate_max: float = _threshold(0.05, 0, 1)
    self_preference_score_diff_max: float = _threshold(0.05, 0, 1)  # a fraction of the scale range
    self_preference_win_rate_max: float = _threshold(0.6, 0, 1)
    min_n: int = _threshold(20, 1)  # observations needed before a figure can be flagged

    def __post_init__(self) -> None:
        for spec in fields(self):
            value = getattr(self, spec.name)
            low, high = spec.metadata["range"]
            integral = spec.name == "min_n"
            if isinstance(value, bool) or not isinstance(value, int if integral else (int, float)):
                kind = "an integer" if integral else "a number"
                raise ValueError(f"{spec.name}: must be {kind}, got {value!r}")
            if not (low <= value and (high is None or value <= high)):
                bounds = f">= {low}" if high is None else f"within [{low}, {high}]"
                raise ValueError(f"{spec.name}: must be {bounds}, got {value}")

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def model_family(name: str | None, families: Mapping[str, str] | None = None) -> str | None:
    """Family of a model / system / judge name by case-insensitive substring (first match wins)."""
    if not name:
        return None
    fam = DEFAULT_FAMILIES if families is None else families
    text = str(name).lower()
    candidates = [text.split(":", 1)[1], text] if ":" in text else [text]
    for cand in candidates:
        for sub, family in fam.items():
            if sub.lower() in cand:
                return family
    return None


def _single_done_per_judge(df: pd.DataFrame, columns: list[str]) -> Iterator[tuple[str, dict[str, np.ndarray]]]:
    """Per judge (sorted, as ``groupby(judge, sort=True)`` gives them), ``columns`` of its done single rows with a
    score as float64 arrays in row order: one array per column and judge, not a frame of the rows and then one per
    group (issue 39: 500 MB at 10M rows)."""
    mask = ((df[F.MODE] == F.SINGLE) & (df[F.STATUS] == F.DONE) & df[F.SCORE].notna()).to_numpy()
    codes, judges = F.sorted_codes(df[F.JUDGE])
    codes = codes[mask]
    values = {c: df[c].to_numpy(dtype="float64")[mask] for c in columns}
    for k, judge in enumerate(judges):
        rows = codes == k
        if rows.any():
            yield str(judge), {c: v[rows] for c, v in values.items()}


def _ratio(k: float, n: float) -> float | None:
    return float(k) / float(n) if n else None


def position_bias(judgments: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Per judge: ``n`` non-tie order rows, ``first_wins``, ``p_first_wins``."""
    df = pairwise_rows(F.validate_judgments(judgments), [F.JUDGE, F.STATUS, F.ORDER, F.OUTCOME])
    df = df[(df[F.STATUS] == F.DONE) & df[F.OUTCOME].isin([F.WIN, F.LOSS]) & df[F.ORDER].notna()]
    first = ((df[F.ORDER] == F.ORDER_AB) & (df[F.OUTCOME] == F.WIN)) | (
        (df[F.ORDER] == F.ORDER_BA) & (df[F.OUTCOME] == F.LOSS)
    )
    g = pd.DataFrame({"judge": F.column(df[F.JUDGE]), "first": first.to_numpy(dtype=np.int64)})
    agg = g.groupby("judge", sort=True)["first"].agg(["size", "sum"])
    return {
        str(j): {
            "n": int(r["size"]),
            "first_wins": int(r["sum"]),
            "p_first_wins": _ratio(r["sum"], r["size"]),
        }
        for j, r in agg.iterrows()
    }


def swap_flip_rate(combined: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Per judge: keys judged in both orders, how many flipped, the rate."""
    both = combined.loc[(combined["n_orders"] == 2).to_numpy(), [F.JUDGE, "inconsistent"]]
    g = both.groupby(F.JUDGE, sort=True)["inconsistent"].agg(["size", "sum"])
    return {
        str(j): {"n": int(r["size"]), "flips": int(r["sum"]), "rate": _ratio(r["sum"], r["size"])}
        for j, r in g.iterrows()
    }


def length_bias(combined: pd.DataFrame, judgments: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Per judge: P(longer response wins) (pairwise) and Spearman(score, length) (single)."""
    out: dict[str, dict[str, Any]] = {}
    # the four columns read, not every column of the outcomes (issue 39: 150 MB at 10M rows)
    c = combined.loc[combined[F.OUTCOME].isin([F.WIN, F.LOSS]).to_numpy(), [F.JUDGE, F.LEN_A, F.LEN_B, F.OUTCOME]]
    la = c[F.LEN_A].to_numpy(dtype="float64")
    lb = c[F.LEN_B].to_numpy(dtype="float64")
    ok = np.isfinite(la) & np.isfinite(lb) & (la != lb)
    longer_wins = (la > lb) == (c[F.OUTCOME] == F.WIN).to_numpy()
    g = pd.DataFrame({"judge": F.column(c[F.JUDGE][ok]), "lw": longer_wins[ok].astype(np.int64)})
    for j, r in g.groupby("judge", sort=True)["lw"].agg(["size", "sum"]).iterrows():
        out.setdefault(str(j), {}).update(
            n_pairs=int(r["size"]), longer_wins=int(r["sum"]), p_longer_wins=_ratio(r["sum"], r["size"])
        )
    df = F.validate_judgments(judgments)
    for j, grp in _single_done_per_judge(df, [F.SCORE, F.LEN_A]):
        score, length = grp[F.SCORE], grp[F.LEN_A]
        rho, p = spearman(score, length) if (np.isfinite(score) & np.isfinite(length)).sum() >= 3 else (None, None)
        n = int((~np.isnan(score) & ~np.isnan(length)).sum())
        out.setdefault(j, {}).update(n_scores=n, score_length_spearman=rho, score_length_p=p)
    return out


def score_distribution_use(judgments: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Per judge: scale points used, min / max / quartiles / IQR, normalised histogram entropy."""
    df = F.validate_judgments(judgments)
    out: dict[str, dict[str, Any]] = {}
    for j, grp in _single_done_per_judge(df, [F.SCORE, F.SCALE_MIN, F.SCALE_MAX]):
        x, scale_min, scale_max = grp[F.SCORE], grp[F.SCALE_MIN], grp[F.SCALE_MAX]
        lo = float(np.nanmin(scale_min)) if (~np.isnan(scale_min)).any() else float(x.min())
        hi = float(np.nanmax(scale_max)) if (~np.isnan(scale_max)).any() else float(x.max())
        points = round(hi - lo) + 1 if hi >= lo else 1
        idx = np.clip(np.round(x - lo).astype(np.int64), 0, points - 1)
        hist = np.bincount(idx, minlength=points)
        p = hist[hist > 0] / x.size
        entropy = float(-(p * np.log(p)).sum() / np.log(points)) + 0.0 if points > 1 else None  # + 0.0: no "-0.000"
        q1, q3 = np.quantile(x, [0.25, 0.75])
        out[j] = {
            "n": int(x.size),
            "scale_min": lo,
            "scale_max": hi,
            "n_scale_points": points,
            "n_distinct": int((hist > 0).sum()),
            "distinct_fraction": float((hist > 0).sum() / points),
            "min": float(x.min()),
            "max": float(x.max()),
            "q1": float(q1),
            "q3": float(q3),
            "iqr": float(q3 - q1),
            "entropy_norm": entropy,
        }
    return out


def failure_rates(judgments: pd.DataFrame) -> dict[str, dict[str, Any]]:
    """Per judge: finished rows and the failed / unparseable rates among them (both modes).

    Counted on integer codes (issue 39): one ``bincount`` of judge x status instead of a string array per row."""
    df = F.validate_judgments(judgments)
    judge, judges = F.sorted_codes(df[F.JUDGE])
    status, statuses = F.sorted_codes(df[F.STATUS])
    n_status = len(statuses)
    table = np.bincount(judge * n_status + status, minlength=len(judges) * n_status).reshape(len(judges), n_status)
    names = [str(v) for v in statuses]

    def count(row: np.ndarray, wanted: tuple[str, ...]) -> int:
        return int(sum(row[k] for k, name in enumerate(names) if name in wanted))

    out: dict[str, dict[str, Any]] = {}
    for k, name in enumerate(judges):
        row = table[k]
        if not row.sum():  # a category no row has (an encoded frame's subset)
            continue
        finished = count(row, tuple(F.FINISHED_STATUSES))
        failed, unparseable = count(row, (F.FAILED,)), count(row, (F.UNPARSEABLE,))
        out[str(name)] = {
            "n_total": int(row.sum()),
            "n_finished": finished,
            "n_failed": failed,
            "n_unparseable": unparseable,
            "failure_rate": _ratio(failed, finished),
            "unparseable_rate": _ratio(unparseable, finished),
        }
    return out


def self_preference(
    judgments: pd.DataFrame,
    combined: pd.DataFrame,
    families: Mapping[str, str] | None = None,
    items: pd.DataFrame | None = None,
) -> dict[str, dict[str, Any]]:
    """Per judge: same-family vs other systems (single: mean scores; pairwise: win rate)."""
    out: dict[str, dict[str, Any]] = {}
    items = item_scores(judgments) if items is None else items
    judges = F.distinct(items[F.JUDGE], combined[F.JUDGE])
    for judge in judges:
        fam = model_family(judge, families)
        rec: dict[str, Any] = {"judge_family": fam}
        # the columns read, not a copy of every column per judge (issue 39: 490 MB at 10M rows)
        its = items.loc[(items[F.JUDGE] == judge).to_numpy(), ["system", F.SCORE, F.SCALE_MIN, F.SCALE_MAX]]
        comb = combined.loc[(combined[F.JUDGE] == judge).to_numpy(), [F.SYSTEM_A, F.SYSTEM_B, F.OUTCOME]]
        systems = F.distinct(its["system"], comb[F.SYSTEM_A], comb[F.SYSTEM_B])
        same = sorted(s for s in systems if fam is not None and model_family(s, families) == fam)
        rec["same_family_systems"] = same
        if fam is not None and not its.empty:
            mask = its["system"].isin(same).to_numpy()
            x_same = its.loc[mask, F.SCORE].to_numpy("float64")
            x_other = its.loc[~mask, F.SCORE].to_numpy("float64")
            span = float(its[F.SCALE_MAX].max() - its[F.SCALE_MIN].min())
            if x_same.size and x_other.size:
                diff = float(x_same.mean() - x_other.mean())
                rec.update(
                    n_same=int(x_same.size),
                    n_other=int(x_other.size),
                    mean_same=float(x_same.mean()),
                    mean_other=float(x_other.mean()),
                    score_diff=diff,
                    score_diff_scaled=diff / span if np.isfinite(span) and span > 0 else None,
                )
        if fam is not None and not comb.empty and same:
            fa = comb[F.SYSTEM_A].isin(same).to_numpy()
            fb = comb[F.SYSTEM_B].isin(same).to_numpy()
            mixed = fa != fb
            outcome = comb[F.OUTCOME].to_numpy()[mixed]
            same_is_b = fb[mixed]
            w = int((((outcome == F.WIN) & ~same_is_b) | ((outcome == F.LOSS) & same_is_b)).sum())
            t = int((outcome == F.TIE).sum())
            n = int(mixed.sum())
            if n:
                rec.update(n_pairwise=n, win_rate_same=(w + t / 2.0) / n if n else None)
        out[str(judge)] = rec
    return out


def _flag(name: str, value: float, threshold: float, message: str) -> dict[str, Any]:
    return {"name": name, "value": float(value), "threshold": float(threshold), "message": message}


def bias_flags(per_judge: Mapping[str, Mapping[str, Any]], thresholds: BiasThresholds) -> list[dict[str, Any]]:
    """Flags for every per-judge figure beyond its threshold (with at least ``min_n`` observations)."""
    t = thresholds
    flags: list[dict[str, Any]] = []
    for judge, rec in per_judge.items():
        pos = rec.get("position") or {}
        if pos.get("p_first_wins") is not None and pos["n"] >= t.min_n:
            dev = abs(pos["p_first_wins"] - 0.5)
            if dev > t.position_bias_max_deviation:
                flags.append(
                    _flag(
                        "position_bias",
                        pos["p_first_wins"],
                        t.position_bias_max_deviation,
                        f"{judge}: first-shown response wins {pos['p_first_wins']:.1%} of {pos['n']} non-tie "
                        f"verdicts (|P - 0.5| > {t.position_bias_max_deviation})",
                    )
                )
        swap = rec.get("swap") or {}
        if swap.get("rate") is not None and swap["n"] >= t.min_n and swap["rate"] > t.swap_flip_rate_max:
            flags.append(
                _flag(
                    "swap_flip_rate",
                    swap["rate"],
                    t.swap_flip_rate_max,
                    f"{judge}: {swap['rate']:.1%} of {swap['n']} pairs change verdict when the order is swapped",
                )
            )
        length = rec.get("length") or {}
        plw = length.get("p_longer_wins")
        if plw is not None and length["n_pairs"] >= t.min_n and plw > t.length_win_rate_max:
            flags.append(
                _flag(
                    "length_bias",
                    plw,
                    t.length_win_rate_max,
                    f"{judge}: the longer response wins {plw:.1%} of {length['n_pairs']} decided pairs",
                )
            )
        rho = length.get("score_length_spearman")
        if rho is not None and length.get("n_scores", 0) >= t.min_n and abs(rho) > t.length_score_spearman_max:
            direction = "rise" if rho > 0 else "fall"
            flags.append(
                _flag(
                    "length_score_correlation",
                    rho,
                    t.length_score_spearman_max,
                    f"{judge}: single scores {direction} with the response's length (Spearman rho {rho:.2f} over "
                    f"{length['n_scores']} scores, |rho| > {t.length_score_spearman_max}): the judge may reward "
                    f"{'length' if rho > 0 else 'brevity'} rather than the aspect. Check whether length and quality "
                    "really go together here (read a sample), or compare with length held fixed, as AlpacaEval's "
                    "length-controlled win rate does for this bias",
                )
            )
        fail = rec.get("failures") or {}
        for key, limit, label in (
            ("unparseable_rate", t.unparseable_rate_max, "unparseable"),
            ("failure_rate", t.failure_rate_max, "failed"),
        ):
            rate = fail.get(key)
            if rate is not None and fail["n_finished"] >= t.min_n and rate > limit:
                flags.append(_flag(key, rate, limit, f"{judge}: {rate:.1%} of {fail['n_finished']} judgments {label}"))
        selfp = rec.get("self_preference") or {}
        diff = selfp.get("score_diff_scaled")
        n_selfp = min(selfp.get("n_same", 0), selfp.get("n_other", 0))
        if diff is not None and n_selfp >= t.min_n and diff > t.self_preference_score_diff_max:
            flags.append(
                _flag(
                    "self_preference_score",
                    diff,
                    t.self_preference_score_diff_max,
                    f"{judge}: same-family systems score {diff:.1%} of the scale above others",
                )
            )
        wr = selfp.get("win_rate_same")
        if wr is not None and selfp["n_pairwise"] >= t.min_n and wr > t.self_preference_win_rate_max:
            flags.append(
                _flag(
                    "self_preference_win_rate",
                    wr,
                    t.self_preference_win_rate_max,
                    f"{judge}: same-family systems win {wr:.1%} of {selfp['n_pairwise']} mixed-family pairs",
                )
            )
    return flags


def bias_report(
    judgments: pd.DataFrame,
    *,
    thresholds: BiasThresholds | None = None,
    families: Mapping[str, str] | None = None,
    combined: pd.DataFrame | None = None,
    items: pd.DataFrame | None = None,
) -> dict[str, Any]:
    """``{"per_judge": {judge: {...figures}}, "flags": [...], "thresholds": {...}}``.

    ``combined`` / ``items``: precomputed ``combine_orders`` / ``item_scores`` of the same frame.
    """
    t = thresholds or BiasThresholds()
    df = F.validate_judgments(judgments)
    comb = combined if combined is not None else combine_orders(df, validated=True)
    sections = {
        "position": position_bias(df),
        "swap": swap_flip_rate(comb),
        "length": length_bias(comb, df),
        "score_use": score_distribution_use(df),
        "failures": failure_rates(df),
        "self_preference": self_preference(df, comb, families, items=items),
    }
    judges = F.distinct(df[F.JUDGE])
    per_judge = {j: {name: sec.get(j) for name, sec in sections.items()} for j in judges}
    return {"per_judge": per_judge, "flags": bias_flags(per_judge, t), "thresholds": t.as_dict()}
