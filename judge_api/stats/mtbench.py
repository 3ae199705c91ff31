"""Loaders for the MT-Bench human-judgment files (lmsys/mt_bench_human_judgments) and the exact
FastChat agreement table built on them.

* ``human.jsonl`` (expert and author votes) -> human ratings frame: one ``preference`` row per vote,
  ``system`` = ``model_a``, ``system_b`` = ``model_b``, value +1 (model_a wins) / 0 (tie) / -1
  (model_b wins), aspect ``overall``, ``turn`` kept, ``item_id`` = ``mtbench-<question_id>-t<turn>``
  (the turn is part of the item so that votes on the two turns are never grouped together).
* ``gpt4_pair.jsonl`` (GPT-4 pairwise verdicts, already order-combined by FastChat) -> either the
  same ratings layout with ``rater = "gpt4_pair"`` and ``tie_inconsistent`` set for
  ``"tie (inconsistent)"``, or a judgments frame.  The judgments frame needs the two presentation
  orders, which the file does not keep, so they are *synthesised*: a consistent verdict becomes two
  order rows with the same outcome, an inconsistent one becomes ``ab``: win and ``ba``: loss (the
  first-shown answer wins both times).  ``combine_orders`` then gives back exactly the file's
  verdicts (``tie (inconsistent)`` -> tie flagged inconsistent); position-bias figures computed on
  these synthetic rows are not meaningful.
* ``mtbench_agreement`` reproduces the paper's Table (FastChat ``compute_agreement.py``): per turn,
  the judge vs ``expert_*`` votes and expert vs expert, S1 (ties kept) and S2 (ties dropped).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from judge_api.stats import frames as F
from judge_api.stats.agreement import (
    human_human_agreement,
    judge_human_agreement,
    preference_votes,
)

ASPECT = "overall"
HUMAN_FILE = "human.jsonl"
GPT4_PAIR_FILE = "gpt4_pair.jsonl"
WINNER_VALUE = {"model_a": 1.0, "model_b": -1.0, "tie": 0.0, "tie (inconsistent)": 0.0}


def mtbench_item_id(question_id: Any, turn: Any) -> str:
    """``mtbench-<question_id>-t<turn>``."""
    return f"mtbench-{int(question_id)}-t{int(turn)}"


def _read(path: str | Path) -> pd.DataFrame:
    df = pd.read_json(Path(path), lines=True, dtype=False)
    missing = {"judge", "model_a", "model_b", "question_id", "turn", "winner"} - set(df.columns)
    if missing:
        raise ValueError(f"{path}: not an MT-Bench judgment file (missing {sorted(missing)})")
    unknown = sorted(set(df["winner"]) - set(WINNER_VALUE))
    if unknown:
        raise ValueError(f"{path}: unknown winner value(s) {unknown}")
    return df


def _item_ids(df: pd.DataFrame) -> list[str]:
    return [mtbench_item_id(q, t) for q, t in zip(df["question_id"], df["turn"], strict=True)]


def _ratings(df: pd.DataFrame, rater: pd.Series | str) -> pd.DataFrame:
    out = pd.DataFrame(
        {
            F.ITEM_ID: _item_ids(df),
            F.SYSTEM: df["model_a"].astype(str),
            F.SYSTEM_B: df["model_b"].astype(str),
            F.ASPECT: ASPECT,
            F.RATER: rater if isinstance(rater, str) else rater.astype(str),
            F.KIND: F.KIND_PREFERENCE,
            F.VALUE: df["winner"].map(WINNER_VALUE).astype("float64"),
            F.SCALE_MIN: -1.0,
            F.SCALE_MAX: 1.0,
            F.TURN: df["turn"].astype("int64"),
            F.TIE_INCONSISTENT: (df["winner"] == "tie (inconsistent)").to_numpy(),
        }
    )
    return F.validate_ratings(out)


def load_mtbench_human(path: str | Path) -> pd.DataFrame:
    """``human.jsonl`` as a human ratings frame (all raters, ``author_*`` included)."""
    df = _read(path)
    return _ratings(df, df["judge"])


def load_mtbench_gpt4_pair(path: str | Path, rater: str = "gpt4_pair") -> pd.DataFrame:
    """``gpt4_pair.jsonl`` as ratings-frame votes of an external judge named ``rater``."""
    return _ratings(_read(path), rater)


def load_mtbench_gpt4_pair_judgments(path: str | Path, judge: str = "gpt4_pair") -> pd.DataFrame:
    """``gpt4_pair.jsonl`` as a pairwise judgments frame with synthesised order rows (module docstring)."""
    df = _read(path)
    n = len(df)
    winner = df["winner"].to_numpy()
    combined = np.select([winner == "model_a", winner == "model_b"], [F.WIN, F.LOSS], default=F.TIE).astype(object)
    inconsistent = winner == "tie (inconsistent)"
    out_ab = np.where(inconsistent, F.WIN, combined)
    out_ba = np.where(inconsistent, F.LOSS, combined)
    items = _item_ids(df)
    rows = pd.DataFrame(
        {
            F.RUN_ID: "mtbench-gpt4-pair",
            F.ITEM_ID: items + items,
            F.MODE: F.PAIRWISE,
            F.SYSTEM_A: np.tile(df["model_a"].astype(str).to_numpy(), 2),
            F.SYSTEM_B: np.tile(df["model_b"].astype(str).to_numpy(), 2),
            F.ASPECT: ASPECT,
            F.JUDGE: judge,
            F.RUBRIC_ID: "fastchat-pair-v2",
            F.ORDER: np.repeat([F.ORDER_AB, F.ORDER_BA], n),
            F.STATUS: F.DONE,
            F.OUTCOME: np.concatenate([out_ab, out_ba]),
        }
    )
    rows[F.PREFERENCE] = rows[F.OUTCOME].map(F.OUTCOME_CODE).astype("float64") * 2.0
    rows[F.JUDGMENT_ID] = np.arange(len(rows))
    return F.validate_judgments(rows)


def load_mtbench_folder(folder: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """``(ratings, judgments)`` from a folder holding ``human.jsonl`` and ``gpt4_pair.jsonl``."""
    base = Path(folder)
    return load_mtbench_human(base / HUMAN_FILE), load_mtbench_gpt4_pair_judgments(base / GPT4_PAIR_FILE)


def mtbench_agreement(
    human_ratings: pd.DataFrame,
    judge_votes: pd.DataFrame,
    *,
    human_prefix: str = "expert_",
    turns: tuple[int, ...] = (1, 2),
) -> dict[int, dict[str, Any]]:
    """Per turn: ``{"judge_vs_human": {...}, "human_vs_human": {...}}`` with S1 / S2 counts.

    ``judge_votes`` is a ratings-layout vote frame of one judge (``load_mtbench_gpt4_pair`` or
    ``agreement.votes_from_judgments``); its turn is taken from the human votes it is compared with.
    """
    humans = preference_votes(human_ratings, human_prefix)
    judge = preference_votes(judge_votes)
    out: dict[int, dict[str, Any]] = {}
    for turn in turns:
        h = humans[humans[F.TURN] == turn]
        items = set(F.distinct(h[F.ITEM_ID]))
        j = judge[judge[F.ITEM_ID].isin(items)]
        out[turn] = {
            "judge_vs_human": judge_human_agreement(j, h),
            "human_vs_human": human_human_agreement(h),
        }
    return out
