#!/usr/bin/env bash
# Set up and run the test suite: install into .venv (with the dev and local extras), make sure Redis and PostgreSQL
# are up on 127.0.0.1 (starting them if this machine has them installed), then run pytest. Extra arguments go to
# pytest (e.g. -k parsing, -m "not e2e").
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
.venv/bin/python -m pip install -q -e '.[dev,local]'
# a llama-cpp-python wheel pip built earlier on a machine with another CPU crashes on this one: rebuild it portably
if ! PYTHONPATH="$PWD" .venv/bin/python scripts/local_judge_check.py >/dev/null 2>&1; then
  echo "llama-cpp-python does not run on this CPU (a cached wheel built elsewhere); rebuilding it portably (~5 min)"
  CMAKE_ARGS="-DGGML_NATIVE=OFF" .venv/bin/python -m pip install -q --no-cache-dir --force-reinstall --no-deps \
    "llama-cpp-python==$(.venv/bin/python -c 'import importlib.metadata as m; print(m.version("llama-cpp-python"))')"
  PYTHONPATH="$PWD" .venv/bin/python scripts/local_judge_check.py
fi
bash scripts/services.sh
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec .venv/bin/python -m pytest -p no:cacheprovider "$@"
