#!/usr/bin/env bash
# Set up .venv, import the bundled sample conversation into a fresh database, and show
# memlane remembering: hybrid search per user, isolation between users, memory formation
# with the offline model (facts, reflections, consolidated blobs, the profile), the Python API.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
ML=.venv/bin/memlane
export MEMLANE_DB=.demo/memlane.db
rm -rf .demo && mkdir -p .demo

step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@"; }

step $ML import examples/sample_conversation.jsonl --form
step $ML search "any food allergies or diet I should know about" -u sam -k 3
step $ML search "when does Grace arrive and on which flight" -u sam -k 3
step $ML search "what is my email address" -u sam -k 2
step $ML search "tell me about my pet" -u sam -k 2
step $ML search "marathon" -u sam -k 3
step $ML search "marathon training goal" -u kai -k 2
step $ML list -u sam -n 10
step $ML reflections -u sam -s s1
step $ML profile -u sam
step $ML add --infer "I moved to Porto last week" -u sam
step $ML jobs -n 5
step $ML stats
step .venv/bin/python examples/quickstart.py
step .venv/bin/python examples/formation.py
