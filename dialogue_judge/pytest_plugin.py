"""pytest plugin: the consistency gate inside a team's own test suite.

Installed with the package (entry point ``pytest11``), so any test can write::

    from dialogue_judge.pytest_plugin import assert_consistent

    def test_new_memory_module_stays_consistent():
        responses = {item["id"]: my_bot.reply(item) for item in load_items("tests/data/items.jsonl")}
        assert_consistent(responses, baseline="tests/data/baseline.jsonl", items="tests/data/items.jsonl",
                          judge="openai:gpt-4o", max_drop=5.0)

or use the ``dialogue_judge_gate`` fixture, whose defaults come from the command line / ini file / environment::

    def test_consistency(dialogue_judge_gate):
        dialogue_judge_gate.assert_consistent(responses, baseline="tests/data/baseline.jsonl",
                                              items="tests/data/items.jsonl")

    pytest --dj-judge openai:gpt-4o            # or: ini "dialogue_judge_judge", env DJ_GATE_JUDGE
           --dj-cache-dir .cache/dialogue-judge # the standalone judge cache (unchanged responses cost nothing)
           --dj-api http://judge.internal:8000  # judge on a running service instead of in-process

``assert_consistent`` runs the same gate as ``dialogue-judge gate`` (standalone by default: SQLite, no Redis) and

* returns the ``GateResult`` when there is no regression,
* raises ``AssertionError`` with the Markdown summary on a regression,
* raises ``GateInconclusive`` (also with the summary) when the gate could not decide or could not run.

This module imports nothing heavy at import time: it is loaded in every pytest session where the package is
installed.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from dialogue_judge.gate import GateResult

JUDGE_ENV = "DJ_GATE_JUDGE"
_DEFAULT: Any = object()


class GateInconclusive(Exception):
    """The gate could not decide (undecided) or could not run (bad input, judge unreachable, ...): exit code 2."""

    def __init__(self, message: str, result: GateResult | None = None) -> None:
        super().__init__(message)
        self.result = result


def assert_consistent(
    responses: Any,
    baseline: Any,
    *,
    items: Any = None,
    judge: str | None = None,
    rubric: str | None = None,
    aspect: str | Sequence[str] | None = _DEFAULT,
    max_drop: float | None = 5.0,
    mode: str = "single",
    max_loss_rate: float = 0.6,
    alpha: float = 0.05,
    seed: int = 0,
    cache_dir: str | os.PathLike[str] | None = None,
    api: str | None = None,
    api_key: str | None = None,
    budget: float | None = None,
    **options: Any,
) -> GateResult:
    """Gate ``responses`` (the candidate) against ``baseline``; see the module docstring.

    ``responses`` / ``baseline``: ``{item_id: response}`` mappings, lists of item or ``{"id", "response"}`` dicts,
    files (JSONL items with one system, or responses files) or run ids. ``items``: the shared dialogue contexts
    (a file or a list of item dicts) when the responses carry none. ``rubric`` defaults to ``rsum-single``
    (``rsum-pairwise`` in pairwise mode) and ``aspect`` to ``consistency`` (the pairwise rubric's own aspects in
    pairwise mode). Further keyword arguments are ``dialogue_judge.gate.GateConfig`` fields (``batch``,
    ``sequential``, ``workers``, ``max_failed``, ``structured_output``, ...).
    """
    from dialogue_judge.gate import GateConfig, run_gate

    judge = judge or os.environ.get(JUDGE_ENV)
    if not judge:
        raise GateInconclusive(
            f"assert_consistent needs a judge: pass judge=..., set {JUDGE_ENV} or run pytest with --dj-judge"
        )
    if aspect is _DEFAULT:
        aspect = "consistency" if mode == "single" else None
    aspects = [aspect] if isinstance(aspect, str) else (list(aspect) if aspect is not None else None)
    config = GateConfig(
        baseline=baseline,
        candidate=responses,
        judge=judge,
        items=items,
        rubric=rubric,
        aspects=aspects,
        mode=mode,
        max_drop=max_drop,
        max_loss_rate=max_loss_rate,
        alpha=alpha,
        seed=seed,
        api=api,
        api_key=api_key,
        database=Path(cache_dir) / "gate.db" if cache_dir is not None else None,
        budget_usd=budget,
        progress=options.pop("progress", False),
        **options,
    )
    result = run_gate(config)
    if result.status == "regression":
        raise AssertionError(result.markdown())
    if result.status != "pass":
        raise GateInconclusive(result.markdown(), result)
    return result


@dataclass
class GateFixture:
    """``dialogue_judge_gate``: ``assert_consistent`` with the session's defaults; keeps every result."""

    defaults: dict[str, Any] = field(default_factory=dict)
    results: list[Any] = field(default_factory=list)

    def assert_consistent(self, responses: Any, baseline: Any, **kwargs: Any) -> GateResult:
        merged = {**self.defaults, **kwargs}
        try:
            result = assert_consistent(responses, baseline, **merged)
        except GateInconclusive as exc:
            self.results.append(exc.result)
            raise
        self.results.append(result)
        return result


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dialogue-judge", "dialogue-judge consistency gate")
    group.addoption("--dj-judge", default=None, help=f"judge for assert_consistent (default: ini or ${JUDGE_ENV})")
    group.addoption("--dj-cache-dir", default=None, help="standalone database / judge cache folder")
    group.addoption("--dj-api", default=None, help="judge on a running dialogue-judge service at this URL")
    parser.addini("dialogue_judge_judge", "judge for assert_consistent", default=None)
    parser.addini("dialogue_judge_cache_dir", "standalone database / judge cache folder", default=None)


@pytest.fixture
def dialogue_judge_gate(request: pytest.FixtureRequest) -> GateFixture:
    """The consistency gate with the defaults of ``--dj-judge`` / ``--dj-cache-dir`` / ``--dj-api``."""
    config = request.config
    defaults: dict[str, Any] = {}
    judge = config.getoption("--dj-judge") or config.getini("dialogue_judge_judge") or os.environ.get(JUDGE_ENV)
    if judge:
        defaults["judge"] = judge
    cache_dir = config.getoption("--dj-cache-dir") or config.getini("dialogue_judge_cache_dir")
    if cache_dir:
        defaults["cache_dir"] = cache_dir
    api = config.getoption("--dj-api")
    if api:
        defaults["api"] = api
    return GateFixture(defaults)
