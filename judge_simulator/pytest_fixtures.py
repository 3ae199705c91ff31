"""Reusable pytest fixtures for the judge simulator.

Register them from ``tests/conftest.py`` with::

    pytest_plugins = ["judge_simulator.pytest_fixtures"]

* ``judge_simulator`` (session scope): one :class:`SimulatorProcess` with the default script for
  the whole test session (starting a subprocess per test would cost ~0.5 s each).
* ``sim`` (function scope): the same process, reset before the test - startup script restored,
  stats, fault counters, RNGs and rate windows cleared - so tests can ``set_script`` freely
  without leaking behaviour into each other.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .process import SimulatorProcess


@pytest.fixture(scope="session")
def judge_simulator() -> Iterator[SimulatorProcess]:
    """A simulator subprocess shared by the test session."""
    with SimulatorProcess() as process:
        yield process


@pytest.fixture
def sim(judge_simulator: SimulatorProcess) -> SimulatorProcess:
    """The shared simulator, reset to its startup script and zero stats for this test."""
    judge_simulator.reset(restore_script=True)
    return judge_simulator
