"""The reference metrics' ``tokenize`` option (issue 26.5): ``char`` tokens on Chinese and Japanese equal a hand
computation, ``auto`` picks ``char`` for CJK references and ParlAI's whitespace tokens otherwise (English figures
unchanged), the version names the tokenisation, and the report's section warns when most references are CJK and
whitespace tokens were used.

On the code before the option, ``lexical_metrics`` split the Chinese and Japanese pairs below on whitespace: each
sentence is one token, so F1 and BLEU were 0 (they differ by a character) however much of them agreed."""

from __future__ import annotations

import math
from typing import Any

import pytest

from judge_api.reference_metrics import bleu, lexical_metrics, reference_rubric, token_f1
from judge_api.reference_tokens import (
    AUTO_CHAR_SHARE,
    VERSIONS,
    Tokenize,
    cjk_share,
    normalize_char,
    reference_version,
    resolve,
    tokenisation_of,
    tokenisation_section,
)

CHINESE = ("我不喜欢苹果！", "我喜欢吃苹果。")  # candidate, reference
JAPANESE = ("京都に行きたい", "東京に行きました")


def test_chinese_char_tokens_equal_a_hand_computation() -> None:
    candidate, reference = CHINESE
    # by hand: the full-width ！ and 。 are punctuation (gone); every ideograph is a token
    # candidate 我 不 喜 欢 苹 果 (6), reference 我 喜 欢 吃 苹 果 (6); shared: 我 喜 欢 苹 果 = 5
    precision, recall = 5 / 6, 5 / 6
    f1 = 2 * precision * recall / (precision + recall)
    # bigrams: candidate 我不 不喜 喜欢 欢苹 苹果 (5), reference 我喜 喜欢 欢吃 吃苹 苹果; shared 喜欢 苹果 = 2
    # equal lengths: brevity penalty 1
    bleu1, bleu2 = 5 / 6, math.sqrt(5 / 6 * 2 / 5)
    assert normalize_char(candidate).split() == ["我", "不", "喜", "欢", "苹", "果"]
    assert token_f1(candidate, reference, "char") == pytest.approx(f1, rel=1e-12)
    assert bleu(candidate, reference, 1, "char") == pytest.approx(bleu1, rel=1e-12)
    assert bleu(candidate, reference, 2, "char") == pytest.approx(bleu2, rel=1e-12)
    assert lexical_metrics(candidate, reference) == pytest.approx({"f1": f1, "bleu-1": bleu1, "bleu-2": bleu2})
    # ParlAI's whitespace tokens: one token each, which differ, so everything is 0
    assert lexical_metrics(candidate, reference, tokenize="whitespace") == {"f1": 0.0, "bleu-1": 0.0, "bleu-2": 0.0}


def test_japanese_char_tokens_equal_a_hand_computation() -> None:
    candidate, reference = JAPANESE
    # by hand: candidate 京 都 に 行 き た い (7), reference 東 京 に 行 き ま し た (8);
    # shared (multiset): 京 に 行 き た = 5
    precision, recall = 5 / 7, 5 / 8
    f1 = 2 * precision * recall / (precision + recall)  # = 2/3
    # bigrams: candidate 京都 都に に行 行き きた たい (6),
    # reference 東京 京に に行 行き きま まし した (7); shared に行 行き = 2
    # the candidate is shorter: brevity penalty exp(1 - 8/7)
    penalty = math.exp(1 - 8 / 7)
    bleu1, bleu2 = penalty * 5 / 7, penalty * math.sqrt(5 / 7 * 2 / 6)
    assert f1 == pytest.approx(2 / 3)
    assert lexical_metrics(candidate, reference, tokenize="char") == pytest.approx(
        {"f1": f1, "bleu-1": bleu1, "bleu-2": bleu2}, rel=1e-12
    )
    assert lexical_metrics(candidate, reference) == lexical_metrics(candidate, reference, tokenize="char")


@pytest.mark.parametrize(
    ("text", "tokens"),
    [
        ("我喜欢Python编程", "我 喜 欢 python 编 程"),  # a Latin word inside CJK text stays one word
        ("「こんにちは」、世界・テスト…", "こ ん に ち は 世 界 テ ス ト"),  # CJK and Unicode punctuation go
        ("コーヒー", "コ ー ヒ ー"),  # the prolonged sound mark is a kana letter, not punctuation
        ("我the好 an apple", "我 好 apple"),  # an article set apart from the ideographs is a whole word
        ("東京2024年", "東 京 2024 年"),  # digits stay a number
        ("안녕하세요 반갑습니다", "안 녕 하 세 요 반 갑 습 니 다"),  # hangul syllables
        ("don’t — “stop”", "don t stop"),  # Unicode punctuation becomes a space, as ParlAI does with ASCII's
        ("The cat sat on the mat.", "cat sat on mat"),
    ],
)
def test_char_normalisation(text: str, tokens: str) -> None:
    assert normalize_char(text) == tokens


@pytest.mark.parametrize(
    ("reference", "share", "chosen"),
    [
        (CHINESE[1], 1.0, "char"),
        (JAPANESE[1], 1.0, "char"),
        ("我喜欢Python编程", 5 / 6, "char"),
        ("I love 寿司", 2 / 4, "char"),  # exactly the threshold
        ("I really love 寿司", 2 / 5, "whitespace"),
        ("Yes, your beagle is called Rex!", 0.0, "whitespace"),
        ("...", 0.0, "whitespace"),  # no token at all
    ],
)
def test_auto_picks_char_for_mostly_cjk_references(reference: str, share: float, chosen: str) -> None:
    assert cjk_share(reference) == pytest.approx(share)
    assert (cjk_share(reference) >= AUTO_CHAR_SHARE) == (chosen == "char")
    assert resolve("auto", reference) == chosen
    assert resolve("whitespace", reference) == "whitespace" and resolve("char", reference) == "char"


def test_the_version_names_the_tokenisation() -> None:
    assert reference_version("whitespace") == "parlai-nltk-1"  # ParlAI's, as every stored judgment before had
    assert reference_version("char") == "parlai-nltk-1.tok-char"
    assert {tokenisation_of(v) for v in VERSIONS.values()} == {"whitespace", "char"}
    with pytest.raises(ValueError, match="not a version of the reference metrics"):
        tokenisation_of("parlai-nltk-2")
    char, whitespace = reference_rubric(VERSIONS["char"]), reference_rubric(VERSIONS["whitespace"])
    assert (char.version, whitespace.version) == (VERSIONS["char"], VERSIONS["whitespace"])
    assert "tokenisation" in char.options and "tokenisation" not in whitespace.options


def _section(references: dict[str, str], tokenize: Tokenize) -> dict[str, Any] | None:
    """The section of a run whose items were planned with ``tokenize`` (as planning resolves it per reference)."""
    versions = {(item, reference_version(resolve(tokenize, text))) for item, text in references.items()}
    return tokenisation_section(versions, references, tokenize)


CJK_REFERENCES = {"c1": CHINESE[1], "c2": JAPANESE[1], "e1": "Yes, your beagle is called Rex!"}
ENGLISH_REFERENCES = {"e1": "Yes, your beagle is called Rex!", "e2": "The cat sat on the mat.", "c1": CHINESE[1]}


def test_the_warning_fires_on_cjk_references_scored_with_whitespace_tokens() -> None:
    section = _section(CJK_REFERENCES, "whitespace")
    assert section is not None and section["warning"] is not None
    assert "2 of 3 references are mostly CJK" in section["warning"] and "tokenize 'auto'" in section["warning"]
    assert section["by_tokenisation"] == {
        "whitespace": {"n_items": 3, "n_unspaced": 2},
        "char": {"n_items": 0, "n_unspaced": 0},
    }


@pytest.mark.parametrize(
    ("references", "tokenize"),
    [
        (CJK_REFERENCES, "auto"),  # the CJK ones got char tokens
        (CJK_REFERENCES, "char"),
        (ENGLISH_REFERENCES, "whitespace"),  # one CJK reference of three: not most
        ({"e1": "Yes, your beagle is called Rex!"}, "whitespace"),
    ],
)
def test_no_warning_otherwise(references: dict[str, str], tokenize: Tokenize) -> None:
    section = _section(references, tokenize)
    assert section is not None and section["warning"] is None and section["n_items"] == len(references)


def test_no_section_without_lexical_reference_judgments() -> None:
    assert tokenisation_section([], {"c1": CHINESE[1]}, "auto") is None
    assert tokenisation_section([("c1", "some-later-version")], {"c1": CHINESE[1]}, "auto") is None
