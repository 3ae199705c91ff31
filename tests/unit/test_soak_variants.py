"""The table of long variants moved to the soak run names tests that exist, and the marker reaches them."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from tests.soak_variants import SOAK_VARIANTS

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("nodeid", sorted(SOAK_VARIANTS))
def test_each_listed_variant_names_a_test_function_that_exists(nodeid: str) -> None:
    path, _, name = nodeid.partition("::")
    function = name.split("[")[0]
    tree = ast.parse((ROOT / path).read_text())
    names = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
    assert function in names, f"{nodeid}: no test function {function} in {path}"
    assert SOAK_VARIANTS[nodeid].strip(), "each entry says which default test keeps its promise"


def test_the_default_run_leaves_a_listed_variant_out_and_keeps_its_sibling() -> None:
    target = "tests/faults/test_idempotent_submit.py::test_api_killed_between_storing_and_answering_then_retried"
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q", target],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    assert f"{target}[postgres]" in listed
    assert f"{target}[sqlite]" not in listed
    soak = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--collect-only", "-q", "-m", "soak", target],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    assert f"{target}[sqlite]" in soak and f"{target}[postgres]" not in soak
