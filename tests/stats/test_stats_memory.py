"""Memory audit (a): lexical P/R/F1 against hand-computed values, and the per-system table with bootstrap CIs."""

from __future__ import annotations

import pandas as pd
import pytest

from judge_api.stats.memory import lexical_prf, memory_audit, tokens


@pytest.mark.parametrize(
    ("generated", "gold", "expected"),
    [
        # identical bags of words
        ("I have two dogs.", "i have TWO dogs", (1.0, 1.0, 1.0)),
        # gen 4 tokens {i,have,three,dogs}, gold 4 {i,have,two,dogs}: overlap 3 -> P = R = F1 = 3/4
        ("I have three dogs", "I have two dogs", (0.75, 0.75, 0.75)),
        # gen 2 {dogs,dogs}, gold 4 {i,have,two,dogs}: clipped overlap 1 -> P 1/2, R 1/4, F1 = 2*(1/8)/(3/4) = 1/3
        ("dogs dogs", "I have two dogs", (0.5, 0.25, 1 / 3)),
        # gen "I'm a nurse in Oslo" -> {i'm,a,nurse,in,oslo} 5 tokens;
        # gold "I am a nurse" -> {i,am,a,nurse} 4 tokens; overlap {a,nurse} 2 -> P 2/5, R 2/4, F1 = 0.4444...
        ("I'm a nurse in Oslo", "I am a nurse", (0.4, 0.5, 2 * 0.4 * 0.5 / 0.9)),
        ("nothing shared", "completely different", (0.0, 0.0, 0.0)),
        ("", "I have two dogs", (0.0, 0.0, 0.0)),
        ("I have two dogs", "", (0.0, 0.0, 0.0)),
        # NFKC: full-width letters are the same tokens
        ("ＤＯＧＳ", "dogs", (1.0, 1.0, 1.0)),
    ],
)
def test_lexical_prf(generated: str, gold: str, expected: tuple[float, float, float]) -> None:
    assert lexical_prf(generated, gold) == pytest.approx(expected)


def test_tokens_keep_contractions() -> None:
    assert tokens("I'm from New-England, 2 dogs!") == ["i'm", "from", "new", "england", "2", "dogs"]


def test_memory_audit_per_system_with_cis() -> None:
    rows = pd.DataFrame(
        [
            {"item_id": "1", "system": "good", "generated": "I have two dogs", "gold": "I have two dogs"},
            {"item_id": "2", "system": "good", "generated": "I have three dogs", "gold": "I have two dogs"},
            {"item_id": "1", "system": "bad", "generated": "nothing shared", "gold": "I have two dogs"},
            {"item_id": "2", "system": "bad", "generated": "dogs dogs", "gold": "I have two dogs"},
        ]
    )
    table = memory_audit(rows, n_boot=500, seed=3).set_index("system")
    assert list(table.index) == ["bad", "good"]
    assert table.loc["good", "n"] == 2
    assert table.loc["good", "f1"] == pytest.approx((1.0 + 0.75) / 2)
    assert table.loc["bad", "precision"] == pytest.approx(0.25)
    for system in ("good", "bad"):
        for name in ("precision", "recall", "f1"):
            low, mid, high = (table.loc[system, f"{name}{s}"] for s in ("_low", "", "_high"))
            assert low <= mid <= high
    assert table.loc["good", "f1_low"] == pytest.approx(0.75) and table.loc["good", "f1_high"] == pytest.approx(1.0)
    again = memory_audit(rows, n_boot=500, seed=3).set_index("system")
    pd.testing.assert_frame_equal(table, again)
    assert memory_audit(rows.iloc[0:0]).empty
