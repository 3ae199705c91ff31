#!/usr/bin/env bash
# Set up and run the test suite: install into .venv (with the dev and local extras), make sure Redis and PostgreSQL
# are up on 127.0.0.1 (starting them if this machine has them installed), then run pytest. Extra arguments go to
# pytest (e.g. -k parsing, -m "not e2e").
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF}" .venv/bin/python -m pip install -q -e '.[dev,local]'
bash scripts/local_judge_setup.sh
bash scripts/services.sh
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec .venv/bin/python -m pytest -p no:cacheprovider "$@"
