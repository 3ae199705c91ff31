"""Moved to ``judge_api.textnorm`` (with the prompt rendering); kept for existing imports."""

from judge_api.textnorm import normalise

__all__ = ["normalise"]
