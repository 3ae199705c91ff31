"""Loopback LLM-judge simulator speaking the OpenAI Chat Completions and Anthropic Messages wire
formats, with a scripted, seeded behaviour (verdicts, latency, faults, rate limits).

Run it with ``python -m judge_simulator --port 0`` or, from Python, with
:class:`~judge_simulator.process.SimulatorProcess`. See ``script.py`` for the behaviour script.
"""

from .app import create_app
from .behaviour import approx_tokens, judge
from .process import SimulatorError, SimulatorProcess
from .script import Fault, Latency, Rule, Script, VerdictTexts, default_rules

__all__ = [
    "Fault",
    "Latency",
    "Rule",
    "Script",
    "SimulatorError",
    "SimulatorProcess",
    "VerdictTexts",
    "approx_tokens",
    "create_app",
    "default_rules",
    "judge",
]
