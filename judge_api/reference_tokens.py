"""How the reference metrics split a text into tokens (a run's ``tokenize`` option).

ParlAI's F1 and BLEU split the normalised text on whitespace. Chinese and Japanese are written without spaces, so a
whole sentence is one token and every score lands near 0 or 1 by accident; ``char`` makes each CJK character a token.

* ``whitespace``: ParlAI's definition as it is (``normalize_answer``, then split on spaces).
* ``char``: the same normalisation, extended as follows, then split on spaces:

  1. lower-case (as ParlAI);
  2. ParlAI's ASCII punctuation and every other Unicode punctuation character (general category ``P*``: ``，。！？、
     「」『』（）・…“”—`` and the like) become a space. ParlAI's list is ASCII only, which would leave ``。`` as a token
     that matches in nearly every Chinese or Japanese pair; on English text this also removes curly quotes and
     dashes, which ParlAI keeps attached to the word;
  3. every CJK character (:data:`CJK_CHARACTERS`: Han ideographs, hiragana, katakana, hangul) is set apart by spaces:
     each is one token. Runs of anything else (Latin words, digits) stay whole words split on whitespace, so
     ``我喜欢Python编程`` gives ``我 喜 欢 python 编 程``;
  4. the articles ``a``, ``an``, ``the`` (whole words) and whitespace runs go as in ParlAI.

  On a text with neither CJK characters nor non-ASCII punctuation, ``char`` gives exactly ParlAI's tokens.
* ``auto`` (the default): ``char`` for an item whose reference is mostly CJK (:func:`is_unspaced`: at least
  :data:`AUTO_CHAR_SHARE` of its ``char`` tokens are CJK characters), ``whitespace`` otherwise. It is decided per
  item, from the reference alone, so every candidate of an item is scored with the same tokens (a system answering a
  Chinese reference in English is not measured on another definition than one answering in Chinese). English items
  get ParlAI's figures unchanged.

A tokenisation is part of the metric's version (:func:`reference_version`): ``parlai-nltk-1`` is ParlAI's whitespace
definition, as before the option existed; ``parlai-nltk-1.tok-char`` is ``char``.
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any, Literal, get_args

Tokenize = Literal["whitespace", "char", "auto"]
"""A run's ``tokenize`` option."""
Tokenisation = Literal["whitespace", "char"]
"""What a text is scored with (``auto`` resolves to one of these per item)."""
TOKENIZE_OPTIONS: tuple[str, ...] = get_args(Tokenize)
DEFAULT_TOKENIZE: Tokenize = "auto"

BASE_VERSION = "parlai-nltk-1"
"""ParlAI's definitions with whitespace tokens (the version every reference judgment had before ``tokenize``)."""
VERSIONS: dict[Tokenisation, str] = {"whitespace": BASE_VERSION, "char": BASE_VERSION + ".tok-char"}

AUTO_CHAR_SHARE = 0.5
"""``auto`` scores an item with ``char`` tokens when at least this share of its reference's ``char`` tokens are CJK
characters (a Latin word counts as one token, like one CJK character)."""

CJK_CHARACTERS = (
    "\u1100-\u11ff"  # Hangul Jamo
    "\u3005\u3007"  # 々 (iteration mark), 〇 (ideographic zero)
    "\u3040-\u30ff"  # Hiragana, Katakana (its punctuation, ゠ and ・, has gone before)
    "\u3130-\u318f"  # Hangul Compatibility Jamo
    "\u31f0-\u31ff"  # Katakana Phonetic Extensions
    "\u3400-\u4dbf"  # CJK Unified Ideographs Extension A
    "\u4e00-\u9fff"  # CJK Unified Ideographs
    "\ua960-\ua97f"  # Hangul Jamo Extended-A
    "\uac00-\ud7ff"  # Hangul Syllables, Hangul Jamo Extended-B
    "\uf900-\ufaff"  # CJK Compatibility Ideographs
    "\uff66-\uff9f"  # Halfwidth Katakana
    "\U00020000-\U0003134f"  # CJK Unified Ideographs Extensions B-G, Compatibility Ideographs Supplement
)
"""The characters ``char`` makes one token each (ranges of a regular-expression class)."""

_CJK = re.compile(f"[{CJK_CHARACTERS}]")
_ARTICLES = re.compile(r"\b(a|an|the)\b")
_ASCII_PUNCTUATION = frozenset(string.punctuation)
"""ParlAI's list (some of it, like ``$`` and ``+``, is Unicode's symbols, not punctuation)."""


def _is_punctuation(char: str) -> bool:
    return char in _ASCII_PUNCTUATION or unicodedata.category(char).startswith("P")


def normalize_char(text: str) -> str:
    """The ``char`` normalisation (module docstring): tokens are the result's space-separated parts."""
    text = "".join(" " if _is_punctuation(c) else c for c in text.lower())
    text = _CJK.sub(lambda m: f" {m.group()} ", text)
    return " ".join(_ARTICLES.sub(" ", text).split())


def cjk_share(text: str) -> float:
    """The share of ``text``'s ``char`` tokens that are CJK characters (0 for a text with no token)."""
    tokens = normalize_char(text).split()
    if not tokens:
        return 0.0
    return sum(1 for t in tokens if _CJK.fullmatch(t)) / len(tokens)


def is_unspaced(reference: str) -> bool:
    """The reference is mostly written in a script without spaces between words (CJK): ``auto`` scores it with
    ``char`` tokens, and ``whitespace`` tokens would make most of it one token."""
    return cjk_share(reference) >= AUTO_CHAR_SHARE


def resolve(tokenize: Tokenize, reference: str) -> Tokenisation:
    """The tokenisation an item with this reference is scored with."""
    if tokenize == "auto":
        return "char" if is_unspaced(reference) else "whitespace"
    return tokenize


def reference_version(tokenisation: Tokenisation) -> str:
    """The version stored with a reference judgment scored with ``tokenisation``."""
    return VERSIONS[tokenisation]


def tokenisation_of(version: str) -> Tokenisation:
    """The tokenisation a reference judgment's version names (ValueError: not a reference metrics version)."""
    for tokenisation, known in VERSIONS.items():
        if version == known:
            return tokenisation
    raise ValueError(f"{version!r} is not a version of the reference metrics ({', '.join(VERSIONS.values())})")


def tokenisation_section(
    versions: Iterable[tuple[str, str]], references: Mapping[str, str], tokenize: str | None
) -> dict[str, Any] | None:
    """The report's ``reference_metrics`` section: how the run's items were tokenised, and a warning when most
    references are unspaced script (:func:`is_unspaced`) and some of those were scored with whitespace tokens.

    ``versions``: (item id, version) of the run's lexical reference judgments (F1, BLEU); ``references``: item id ->
    reference; ``tokenize``: the run's option (None: unknown). None when the run has no lexical reference judgment.
    """
    by_item: dict[str, set[Tokenisation]] = {}
    for item_id, version in versions:
        try:
            tokenisation = tokenisation_of(version)
        except ValueError:
            continue  # not one of ours (a later definition): counted nowhere rather than guessed
        by_item.setdefault(item_id, set()).add(tokenisation)
    if not by_item:
        return None
    unspaced = {item_id for item_id in by_item if is_unspaced(references.get(item_id) or "")}
    counts = {
        t: {
            "n_items": sum(1 for used in by_item.values() if t in used),
            "n_unspaced": sum(1 for i in unspaced if t in by_item[i]),
        }
        for t in VERSIONS
    }
    spaced_out = counts["whitespace"]["n_unspaced"]
    warning = None
    if 2 * len(unspaced) > len(by_item) and spaced_out:
        warning = (
            f"{len(unspaced)} of {len(by_item)} references are mostly CJK script, written without spaces, and "
            f"{spaced_out} of them were scored with whitespace tokens (ParlAI's definition): a sentence is then one "
            "token and F1 / BLEU land near 0 or 1 by accident. Submit with tokenize 'auto' (the default) or 'char'."
        )
    return {
        "tokenize": tokenize,
        "n_items": len(by_item),
        "n_unspaced": len(unspaced),
        "auto_char_share": AUTO_CHAR_SHARE,
        "by_tokenisation": counts,
        "versions": {t: VERSIONS[t] for t in VERSIONS},
        "warning": warning,
    }
