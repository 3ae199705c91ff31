"""Make the simulator fixtures available to tests/simulator even when the project-wide
tests/conftest.py does not (yet) register ``workers.simulator.pytest_fixtures``; a no-op once it
does."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

_ROOT = str(Path(__file__).resolve().parents[2])
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)

_PLUGIN = "workers.simulator.pytest_fixtures"


def pytest_configure(config: pytest.Config) -> None:
    if not config.pluginmanager.has_plugin(_PLUGIN):
        config.pluginmanager.import_plugin(_PLUGIN)
