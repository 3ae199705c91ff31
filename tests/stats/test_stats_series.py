"""judge_api.stats.series: the series from additive hourly sums equals a direct pandas computation, whether the
verdicts come whole or as sums of parts (what retention keeps plus what is still stored)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from judge_api.stats.series import hourly_sums, series, series_of_verdicts


def verdicts(n: int = 500, seed: int = 3) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    facts = rng.random(n) < 0.5
    return pd.DataFrame(
        {
            "ts": pd.Timestamp("2026-11-20") + pd.to_timedelta(rng.integers(0, 3 * 86400, n), unit="s"),
            "system": rng.choice(["bot-a", "bot-b"], n),
            "version": rng.choice(["v1", "v2", "v3"], n),
            "segment": rng.choice(["", "web"], n),
            "rubric_id": np.where(facts, "fact-check", "rsum-single"),
            "aspect": "consistency",
            "judge": "j",
            "score": rng.integers(1, 101, n).astype(float),
            "contradiction_rate": [float(x) if f else None for x, f in zip(rng.random(n), facts, strict=True)],
        }
    )


@pytest.mark.parametrize(("bucket", "freq"), [("1h", "h"), ("1d", "D")])
def test_series_equals_pandas(bucket: str, freq: str) -> None:
    frame = verdicts()
    got = series_of_verdicts(frame, bucket, ["version", "segment"], confidence=0.9)
    frame["bucket_start"] = frame["ts"].dt.floor(freq)
    keys = ["bucket_start", "version", "segment", "rubric_id"]
    want = frame.groupby(keys).agg(
        n=("score", "size"), mean=("score", "mean"), sd=("score", "std"), rate=("contradiction_rate", "mean")
    )
    assert len(got) == len(want)
    for row in got.to_dict("records"):
        expected = want.loc[(row["bucket_start"], row["version"], row["segment"], row["rubric_id"])]
        assert row["system"] is None
        assert row["n"] == expected["n"]
        assert row["mean"] == pytest.approx(expected["mean"])
        if expected["n"] >= 2:
            half = stats.t.ppf(0.95, expected["n"] - 1) * expected["sd"] / np.sqrt(expected["n"])
            assert row["ci_low"] == pytest.approx(expected["mean"] - half)
            assert row["ci_high"] == pytest.approx(expected["mean"] + half)
        else:
            assert row["ci_low"] is None and row["ci_high"] is None
        if row["rubric_id"] == "fact-check":
            assert row["contradiction_rate"] == pytest.approx(expected["rate"])
        else:
            assert row["contradiction_rate"] is None and row["contradiction_n"] == 0


def test_sums_of_parts_add_up_to_the_whole() -> None:
    frame = verdicts()
    parts = [hourly_sums(frame.iloc[i::3]) for i in range(3)]  # e.g. kept sums, late rows, live verdicts
    combined = series(pd.concat(parts, ignore_index=True), "1d", ["system"])
    whole = series_of_verdicts(frame, "1d", ["system"])
    pd.testing.assert_frame_equal(combined.reset_index(drop=True), whole.reset_index(drop=True), check_exact=False)


def test_bad_arguments_and_empty() -> None:
    assert series_of_verdicts(verdicts(0)).empty
    with pytest.raises(ValueError, match="bucket"):
        series(hourly_sums(verdicts(10)), "2h")
    with pytest.raises(ValueError, match="by"):
        series(hourly_sums(verdicts(10)), "1h", ["judge"])


def test_a_fact_check_response_addressing_no_fact_counts_in_the_rate_not_the_mean() -> None:
    frame = pd.DataFrame(
        {
            "ts": [pd.Timestamp("2026-11-20 10:05")] * 3,
            "system": "bot",
            "version": "v1",
            "segment": "",
            "rubric_id": "fact-check",
            "aspect": "consistency",
            "judge": "j",
            "score": [80.0, 40.0, None],  # the third addressed no fact: n/a, contradicting nothing
            "contradiction_rate": [0.0, 0.5, 0.0],
        }
    )
    row = series_of_verdicts(frame).iloc[0]
    assert row["n"] == 2 and row["mean"] == pytest.approx(60.0)
    assert row["contradiction_n"] == 3 and row["contradiction_rate"] == pytest.approx(0.5 / 3)
