"""Reference metric definitions, pinned to ParlAI's (``parlai/core/metrics.py``: ``normalize_answer``, ``_f1_score``,
``_bleu``) on fixed strings.

The expected values were produced at test-writing time by running a verbatim copy of those four ParlAI functions
(with nltk 3.10.4's ``sentence_bleu``) on the same strings: BLEU-1 = weights [1.0], BLEU-2 = weights [0.5, 0.5],
``SmoothingFunction(epsilon=1e-12).method1``. A few are also derivable by hand (noted per row).
"""

from __future__ import annotations

import math

import pytest

from judge_api.reference_metrics import bleu, lexical_metrics, normalize_answer, token_f1
from judge_api.reference_tokens import resolve

# candidate, reference, normalised candidate, F1, BLEU-1, BLEU-2 (ParlAI's outputs)
CASES = [
    ("The cat sat on the mat.", "The cat sat on the mat.", "cat sat on mat", 1.0, 1.0, 1.0),
    # by hand: "cat sat" vs "cat sat on mat": P=1, R=1/2 -> F1 2/3; p1=p2=1, BP=exp(1-4/2)
    ("the cat sat", "The cat sat on the mat.", "cat sat", 2 / 3, math.exp(-1), math.exp(-1)),
    ("A dog! An apple, the end...", "dog apple end", "dog apple end", 1.0, 1.0, 1.0),
    (
        "I love my beagle Rex; he's 3 years old.",
        "My beagle Rex is 3 years old and I love him.",
        "i love my beagle rex he s 3 years old",
        0.761904761904762,
        0.7238699344287677,
        0.6032249453573064,
    ),
    ("Totally unrelated words here", "The cat sat on the mat.", "totally unrelated words here", 0.0, 0.0, 0.0),
    (
        "Yeah perfect! How many of us will be going?",
        "Oh wow! Yeah, that will be quite the adjustment. Are you sure you want to move?",
        "yeah perfect how many of us will be going",
        0.25,
        0.17113903967753066,
        0.1048008305699687,
    ),
    (
        "That's interesting. Tell me more about it!",
        "Yeah perfect! How many of us will be going?",
        "that s interesting tell me more about it",
        0.0,
        0.0,
        0.0,
    ),
    # by hand: clipped unigram precision 1/4, no bigram match -> smoothed p2 = 1e-12/3, BLEU-2 = sqrt(1/4 * 1e-12/3)
    ("rain rain rain rain", "rain in spain", "rain rain rain rain", 0.28571428571428575, 0.25, 2.8867513459481284e-07),
    ("Theater-goers: the_end (a) an.", "theater goers end", "theater goers end", 1.0, 1.0, 1.0),
    ("ÉCOLE café", "école Café", "école café", 1.0, 1.0, 1.0),
]


@pytest.mark.parametrize(("candidate", "reference", "normalised", "f1", "bleu1", "bleu2"), CASES)
def test_metrics_match_parlai(
    candidate: str, reference: str, normalised: str, f1: float, bleu1: float, bleu2: float
) -> None:
    assert normalize_answer(candidate) == normalised
    assert token_f1(candidate, reference) == pytest.approx(f1, rel=1e-12, abs=0)
    assert bleu(candidate, reference, 1) == pytest.approx(bleu1, rel=1e-12, abs=0)
    assert bleu(candidate, reference, 2) == pytest.approx(bleu2, rel=1e-12, abs=0)
    assert lexical_metrics(candidate, reference) == pytest.approx({"f1": f1, "bleu-1": bleu1, "bleu-2": bleu2})


@pytest.mark.parametrize(("candidate", "reference", "normalised", "f1", "bleu1", "bleu2"), CASES)
def test_english_figures_under_auto_are_parlais(
    candidate: str, reference: str, normalised: str, f1: float, bleu1: float, bleu2: float
) -> None:
    """The pinned ParlAI cases: auto resolves to whitespace and gives the same floats, bit for bit; char gives
    them too (none of these texts has a CJK character or non-ASCII punctuation)."""
    assert resolve("auto", reference) == "whitespace"
    auto = lexical_metrics(candidate, reference, tokenize="auto")
    assert auto == lexical_metrics(candidate, reference, tokenize="whitespace")
    assert auto == pytest.approx({"f1": f1, "bleu-1": bleu1, "bleu-2": bleu2}, rel=1e-12, abs=0)
    assert lexical_metrics(candidate, reference, tokenize="char") == auto


@pytest.mark.parametrize(
    ("text", "normalised"),
    [
        ("  Hello,   WORLD  ", "hello world"),
        ("The theatre is an anthem", "theatre is anthem"),  # articles only as whole words
        ("a-b the.c an_d", "b c d"),  # punctuation becomes a space first, so the articles become words
        ("tab\tand\nnewline", "tab and newline"),
        ("The!", ""),
    ],
)
def test_normalisation(text: str, normalised: str) -> None:
    assert normalize_answer(text) == normalised


def test_empty_after_normalisation_scores_zero() -> None:
    assert token_f1("The!", "the cat") == 0.0
    assert bleu("a an the", "the cat", 1) == 0.0


def test_f1_is_symmetric_and_bleu_is_not() -> None:
    assert token_f1("cat sat", "cat sat on mat") == token_f1("cat sat on mat", "cat sat")
    assert bleu("cat sat", "cat sat on mat", 1) != bleu("cat sat on mat", "cat sat", 1)
