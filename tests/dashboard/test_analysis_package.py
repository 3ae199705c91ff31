"""``dashboard.analysis`` is a package of pure modules (issue 26, rooms): the pages call ``analysis.<name>``, so every
public name of every module is re-exported by the package, and none of them draws with Streamlit."""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import dashboard.analysis as analysis

MODULES = [info.name for info in pkgutil.iter_modules(analysis.__path__)]


def _defined(module_name: str) -> set[str]:
    """The public names a module defines (functions, classes, constants), not those it imports."""
    tree = ast.parse(Path(importlib.import_module(f"dashboard.analysis.{module_name}").__file__ or "").read_text())
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return {n for n in names if not n.startswith("_")}


def test_every_public_name_is_re_exported_by_the_package() -> None:
    assert len(MODULES) >= 9
    for module_name in MODULES:
        module = importlib.import_module(f"dashboard.analysis.{module_name}")
        for name in _defined(module_name):
            assert getattr(analysis, name, None) is getattr(module, name), f"analysis.{name} ({module_name})"
            assert name in analysis.__all__, name


def test_no_module_imports_streamlit() -> None:
    for module_name in ["__init__", *MODULES]:
        source = (Path(analysis.__path__[0]) / f"{module_name}.py").read_text()
        imported = {
            alias.name.split(".")[0]
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Import)
            for alias in node.names
        } | {
            (node.module or "").split(".")[0]
            for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.ImportFrom)
        }
        assert "streamlit" not in imported, module_name


def test_leaderboard_frames_show_the_interval_warning_and_n() -> None:
    """Issue 41: where the dashboard shows a score or paired interval, it shows its n and its ci_warning."""
    from dashboard.analysis import paired_frame, scores_frame

    report = {
        "scores": [{"system": "A", "aspect": "c", "judge": "j", "n": 1, "ci_low": None, "ci_high": None,
                    "ci_warning": "1 item: no interval of the mean of scores"}],
        "paired": [{"aspect": "c", "judge": "j", "system_x": "A", "system_y": "B", "n_pairs": 1,
                    "ci_warning": "1 item: no interval of the mean of differences"}],
    }  # fmt: skip
    scores = scores_frame(report)
    assert scores.loc[0, "n"] == 1 and scores.loc[0, "ci_warning"] == "1 item: no interval of the mean of scores"
    paired = paired_frame(report)
    assert paired.loc[0, "n_pairs"] == 1
    assert paired.loc[0, "ci_warning"] == "1 item: no interval of the mean of differences"


def test_paper_frame_shows_the_n_behind_each_cell() -> None:
    """Issue 41: references on 4 of 10 items: the F1 cell says 4, the aspect cell 10."""
    from dashboard.analysis import paper_frame

    report = {"paper_table": {"metrics": ["f1"], "aspects": ["coherence"], "rows": [
        {"judge": "j", "system": "A", "metrics": {"f1": 0.5}, "values": {"coherence": 70.0}, "average": 70.0,
         "n_items": 10, "metrics_n": {"f1": 4}, "n": {"coherence": 10}}]}}  # fmt: skip
    row = paper_frame(report, "j").iloc[0]
    assert (row["F1"], row["F1 n"], row["Coherence n"], row["Items"]) == (0.5, 4, 10, 10)
