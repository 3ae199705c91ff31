#!/usr/bin/env bash
# Make sure the embedded SmolLM2 judge runs in .venv: llama-cpp-python compiled with this CPU's full instruction set
# (the default, or a wheel pip cached from another machine) can crash with a segmentation fault on machines whose CPU
# reports instructions the OS does not enable. Then the cached wheel is dropped and llama-cpp-python is rebuilt
# portably (GGML_NATIVE=OFF, about 5 minutes); pip caches that build, so the next fresh clone installs it at once.
set -euo pipefail
cd "$(dirname "$0")/.."
if PYTHONPATH="$PWD" .venv/bin/python scripts/local_judge_check.py >/dev/null 2>&1; then
  exit 0
fi
version=$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("llama-cpp-python"))')
echo "llama-cpp-python $version does not run on this CPU; rebuilding it portably (~5 min)"
.venv/bin/python -m pip cache remove 'llama_cpp_python*' >/dev/null 2>&1 || true
CMAKE_ARGS="-DGGML_NATIVE=OFF" .venv/bin/python -m pip install -q --force-reinstall --no-deps \
  --no-binary llama-cpp-python "llama-cpp-python==$version"
PYTHONPATH="$PWD" .venv/bin/python scripts/local_judge_check.py
