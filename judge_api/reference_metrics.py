"""Reference metrics: zero-cost scores of a candidate response against the item's human reference.

Computed by the workers for every candidate of an item that has a ``reference`` (no provider call), stored as
judgments of the pseudo-judge ``reference`` (one aspect per metric, scale 0..1), so the report, the paper table, the
dashboard and the gate treat them like any judge's scores.

Definitions (those of ParlAI's ``parlai/core/metrics.py``, which the long-term-dialogue papers' MSC numbers use):

* normalisation (``normalize_answer``): lower-case; every ASCII punctuation character becomes a space; the articles
  ``a``, ``an``, ``the`` (whole words) become spaces; whitespace runs collapse to one space, ends stripped;
* ``f1``: unigram precision/recall F1 of the normalised tokens (multiset overlap); 0 when nothing overlaps;
* ``bleu-1`` / ``bleu-2``: NLTK's ``sentence_bleu`` on the normalised text split on single spaces, uniform weights
  over 1..n-grams, smoothing ``SmoothingFunction(epsilon=1e-12).method1`` (a zero n-gram precision counts as
  1e-12 / denominator), brevity penalty as NLTK;
* tokens: the run's ``tokenize`` option (``whitespace``, ``char`` or ``auto``, the default) chooses how the
  normalised text is split; ``whitespace`` is ParlAI's definition above, ``char`` makes each CJK character a token
  (``judge_api.reference_tokens`` says exactly how), ``auto`` takes ``char`` for an item whose reference is mostly
  CJK. The tokenisation is part of the stored version (``parlai-nltk-1``: whitespace, ``parlai-nltk-1.tok-char``);
* ``bertscore`` (optional): BERTScore F1 (``bert-score``) with a model from a local directory the operator names
  (``DJ_BERTSCORE_MODEL``); never downloaded (see ``workers.bertscore``).
"""

from __future__ import annotations

import re
from collections import Counter
from functools import lru_cache
from typing import TYPE_CHECKING, Literal

from judge_api.reference_tokens import (
    BASE_VERSION,
    VERSIONS,
    Tokenisation,
    Tokenize,
    normalize_char,
    resolve,
    tokenisation_of,
)

if TYPE_CHECKING:
    from judge_api.rubrics import Rubric

MetricName = Literal["f1", "bleu-1", "bleu-2", "bertscore"]
METRICS: tuple[MetricName, ...] = ("f1", "bleu-1", "bleu-2", "bertscore")
DEFAULT_METRICS: tuple[MetricName, ...] = ("f1", "bleu-1", "bleu-2")
LEXICAL_METRICS: tuple[MetricName, ...] = ("f1", "bleu-1", "bleu-2")
"""The metrics computed from tokens (the run's ``tokenize`` applies to them; BERTScore has its own tokenizer)."""
LABELS: dict[str, str] = {"f1": "F1", "bleu-1": "BLEU-1", "bleu-2": "BLEU-2", "bertscore": "BERTScore"}

REFERENCE_JUDGE = "reference"
"""The pseudo-judge whose judgments hold the reference metrics (aspect = metric name)."""
REFERENCE_RUBRIC = "reference-metrics"
REFERENCE_VERSION = BASE_VERSION
"""Stored as the judgments' rubric version (with whitespace tokens; ``reference_tokens.VERSIONS`` has the others): a
change of a definition gets a new version."""
SCALE = (0.0, 1.0)
BLEU_SMOOTHING = "nltk SmoothingFunction(epsilon=1e-12).method1 (ParlAI's)"

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = re.compile(r"[!\"#$%&()*+,\-./:;<=>?@\[\]\\^`{|}~_']")


def is_reference_judge(judge: str) -> bool:
    return judge == REFERENCE_JUDGE


def normalize_answer(text: str) -> str:
    """ParlAI's normalisation: lower-case, punctuation and articles to spaces, whitespace collapsed."""
    text = _PUNCTUATION.sub(" ", text.lower())
    return " ".join(_ARTICLES.sub(" ", text).split())


def normalized(text: str, tokenisation: Tokenisation = "whitespace") -> str:
    """The normalised text whose space-separated parts are the tokens (ParlAI's, or ``char``'s)."""
    return normalize_char(text) if tokenisation == "char" else normalize_answer(text)


def token_f1(candidate: str, reference: str, tokenisation: Tokenisation = "whitespace") -> float:
    """Unigram F1 of the normalised tokens (ParlAI's ``_f1_score`` with one reference)."""
    guess = normalized(candidate, tokenisation).split()
    gold = normalized(reference, tokenisation).split()
    same = sum((Counter(guess) & Counter(gold)).values())
    if same == 0:
        return 0.0
    precision, recall = same / len(guess), same / len(gold)
    return 2 * precision * recall / (precision + recall)


def bleu(candidate: str, reference: str, n: int, tokenisation: Tokenisation = "whitespace") -> float:
    """BLEU-n (uniform weights over 1..n-grams) as ParlAI's ``_bleu`` computes it with NLTK."""
    from nltk.translate import bleu_score

    return float(
        bleu_score.sentence_bleu(
            [normalized(reference, tokenisation).split(" ")],
            normalized(candidate, tokenisation).split(" "),
            weights=[1.0 / n] * n,
            smoothing_function=bleu_score.SmoothingFunction(epsilon=1e-12).method1,
        )
    )


def lexical_metrics(
    candidate: str, reference: str, metrics: tuple[str, ...] = DEFAULT_METRICS, tokenize: Tokenize = "auto"
) -> dict[str, float]:
    """The lexical metrics among ``metrics`` (``bertscore`` is computed by the workers with its model), with the
    tokens ``tokenize`` gives this reference."""
    tokenisation = resolve(tokenize, reference)
    out: dict[str, float] = {}
    for name in metrics:
        if name == "f1":
            out[name] = token_f1(candidate, reference, tokenisation)
        elif name in ("bleu-1", "bleu-2"):
            out[name] = bleu(candidate, reference, int(name[-1]), tokenisation)
    return out


def reference_version(tokenize: Tokenize, reference: str) -> str:
    """The version an item's reference judgments are planned (and stored) with: it names the tokenisation."""
    return VERSIONS[resolve(tokenize, reference)]


@lru_cache(maxsize=len(VERSIONS))
def reference_rubric(version: str = REFERENCE_VERSION) -> Rubric:
    """The pseudo-rubric the reference metric judgments of ``version`` are planned with (stored as a snapshot with
    the run, so a judgment names the definitions it was computed with). Nothing renders it: no judge is asked."""
    from judge_api.rubrics import Rubric

    options: dict[str, str] = {"bleu_smoothing": BLEU_SMOOTHING, "normalisation": "ParlAI normalize_answer"}
    if tokenisation_of(version) == "char":
        # the whitespace version's content stays what it was stored as before the option existed
        options["tokenisation"] = (
            "char: each CJK character one token, other runs whitespace words; Unicode punctuation to spaces"
        )
    rubric = Rubric.model_validate(
        {
            "id": REFERENCE_RUBRIC,
            "description": "Reference metrics computed by the workers without a judge: "
            + "; ".join(f"{LABELS[m]}" for m in METRICS),
            "origin": "ParlAI parlai/core/metrics.py (normalize_answer, _f1_score, _bleu); bert-score (optional)",
            "kind": "single",
            "aspects": [{"name": m, "label": LABELS[m]} for m in METRICS],
            "scale": list(SCALE),
            "messages": [{"role": "user", "text": "(computed from the item's reference; no judge is asked)"}],
            "parser": "json_score",
            "options": options,
        }
    )
    rubric.version = version
    return rubric
