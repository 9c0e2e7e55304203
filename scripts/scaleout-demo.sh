#!/usr/bin/env bash
# The scaled-out deployment on one machine: a local PostgreSQL 16 + pgvector (from the pgserver
# wheel), Redis (the one on 127.0.0.1:6379, or started), two `memlane serve` replicas that leave
# formation to two `memlane worker` processes. Moves the sample conversation into it with
# `memlane migrate`, writes through one replica, reads through the other, forms memory on a worker.
# Everything it starts is stopped on exit. Production: your own PostgreSQL (with pgvector) and Redis.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}
PY=.venv/bin/python ML=.venv/bin/memlane
rm -rf .scaleout && mkdir -p .scaleout
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  $PY -m memlane.devserver stop .scaleout/pg >/dev/null 2>&1 || true
  [ -n "${REDIS:-}" ] && $PY -c 'import redis, sys; r = redis.Redis.from_url(sys.argv[1]); ks = list(r.scan_iter(match=sys.argv[2] + "*")); ks and r.delete(*ks)' "$REDIS" "$PREFIX" || true
}
trap cleanup EXIT
step() { printf '\n\033[1m$ %s\033[0m\n' "$*"; "$@"; }
search() {  # search PORT QUERY: the top hits through one replica
  printf '\n\033[1m$ POST localhost:%s/v1/search {"query": "%s", "user_id": "sam"}\033[0m\n' "$1" "$2"
  curl -s -X POST "localhost:$1/v1/search" -H 'content-type: application/json' \
       -d "{\"query\": \"$2\", \"user_id\": \"sam\", \"top_k\": 2}" |
    $PY -c 'import json, sys; [print("  -", h["fact"]["content"]) for h in json.load(sys.stdin)["hits"]]'
}
wait_up() { for _ in $(seq 100); do curl -sf "localhost:$1/health" >/dev/null && return 0; sleep 0.2; done; return 1; }

printf '\n\033[1m# servers\033[0m\n'
PG=$($PY -m memlane.devserver postgres .scaleout/pg)
REDIS=$($PY -m memlane.devserver redis)
PREFIX="memlane-demo-$$:"  # this run's keys (deleted on exit)
echo "PostgreSQL: $PG"; echo "Redis:      $REDIS"
export MEMLANE_DB="$PG?schema=demo" MEMORY_TYPE=redis \
       MEMORY_REDIS_URL="$REDIS?prefix=$PREFIX" MEMLANE_QUEUE="$REDIS?prefix=${PREFIX}q:" \
       MEMLANE_FORMATION_WORKER=false MEMLANE_EMBEDDER=hash

printf '\n\033[1m# an embedded SQLite store, moved into PostgreSQL\033[0m\n'
step env MEMLANE_DB=.scaleout/embedded.db MEMORY_TYPE=sqlite $ML import examples/sample_conversation.jsonl -q
step $ML migrate --from .scaleout/embedded.db --to "$MEMLANE_DB" -q

printf '\n\033[1m# two replicas, two workers\033[0m\n'
$ML serve --port 8101 > .scaleout/a.log 2>&1 & pids+=($!)
$ML serve --port 8102 > .scaleout/b.log 2>&1 & pids+=($!)
$ML worker > .scaleout/w1.log 2>&1 & pids+=($!)
$ML worker > .scaleout/w2.log 2>&1 & pids+=($!)
wait_up 8101 && wait_up 8102
search 8102 "any food allergies"
step curl -s -o /dev/null -w '%{http_code}\n' -X POST localhost:8101/v1/memories \
     -H 'content-type: application/json' -d '{"text": "Sam moved to Porto last week", "user_id": "sam"}'
search 8102 "where does Sam live now"
step curl -s -X POST localhost:8101/v1/sessions -H 'content-type: application/json' \
     -d '{"app": "demo", "session_id": "s9", "user_ids": ["sam"]}' -o /dev/null -w '%{http_code}\n'
for msg in "I am allergic to peanuts." "My sister Ana lives in Lisbon." "I run every morning." "I work as a nurse."; do
  curl -s -X POST 'localhost:8102/v1/sessions/s9/events?app=demo' -H 'content-type: application/json' \
       -d "{\"content\": \"$msg\", \"author\": \"sam\"}" >/dev/null
done
step curl -s -X POST 'localhost:8101/v1/sessions/s9/form?app=demo' -H 'content-type: application/json' -d '{}'; echo
sleep 1
search 8102 "sister"
printf '\n\033[1m# the workers\033[0m\n'; cat .scaleout/w1.log .scaleout/w2.log
