"""BERTScore (Zhang et al. 2020) as an optional reference metric, from a model in a local directory only.

Needs the ``bert-score`` package (``pip install 'dialogue-judge[bertscore]'``, which brings torch and transformers)
and ``DJ_BERTSCORE_MODEL`` pointing at a Hugging Face model directory on the worker host (``config.json``, weights,
tokenizer files), with ``DJ_BERTSCORE_LAYERS`` the layer to use (bert-score's table of layers only knows hub names).
Nothing is ever downloaded: the hub is switched off for the process before the model is loaded, and a path that is
not a directory is refused before ``transformers`` sees it. The score is BERTScore's F1 without baseline rescaling
(the rescaling baselines are per hub model).
"""

from __future__ import annotations

import importlib.util
import os
import threading
from pathlib import Path
from typing import Any

INSTALL_HINT = "pip install 'dialogue-judge[bertscore]'"


class BertScoreUnavailable(RuntimeError):
    """BERTScore cannot be computed here; the message says what to do."""


def check_available(model_dir: str | None) -> Path:
    """The model directory, or BertScoreUnavailable naming what is missing."""
    if not model_dir:
        raise BertScoreUnavailable(
            "the bertscore metric needs DJ_BERTSCORE_MODEL=<local model directory> on the workers "
            f"(a Hugging Face model folder; nothing is downloaded) and {INSTALL_HINT}"
        )
    path = Path(model_dir).expanduser()
    if not path.is_dir() or not (path / "config.json").is_file():
        raise BertScoreUnavailable(
            f"DJ_BERTSCORE_MODEL={model_dir!r} is not a local model directory (no config.json there); "
            "BERTScore never downloads a model"
        )
    if importlib.util.find_spec("bert_score") is None:
        raise BertScoreUnavailable(f"the bertscore metric needs the 'bert-score' package: {INSTALL_HINT}")
    return path


_scorers: dict[tuple[str, int | None], Any] = {}
_lock = threading.Lock()


def _scorer(path: Path, layers: int | None) -> Any:
    key = (str(path), layers)
    with _lock:
        scorer = _scorers.get(key)
        if scorer is None:
            os.environ["HF_HUB_OFFLINE"] = "1"  # a local folder only: never reach for the hub
            os.environ["TRANSFORMERS_OFFLINE"] = "1"
            import bert_score

            if layers is None:
                raise BertScoreUnavailable(
                    "DJ_BERTSCORE_LAYERS is not set: bert-score knows the layer to use only for hub model names; set "
                    "it to the layer of your local model (bert-score's model2layers table lists the recommended ones)"
                )
            scorer = bert_score.BERTScorer(model_type=str(path), num_layers=layers, lang="en")
            _scorers[key] = scorer
        return scorer


def bertscore_f1(
    candidates: list[str], references: list[str], model_dir: str | None, layers: int | None
) -> list[float]:
    """BERTScore F1 of each candidate against its reference (lists of equal length)."""
    path = check_available(model_dir)
    scorer = _scorer(path, layers)
    with _lock:  # one forward pass at a time per process: the model is shared by the call threads
        _, _, f1 = scorer.score(candidates, references)
    return [float(v) for v in f1.tolist()]
