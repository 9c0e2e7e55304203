#!/usr/bin/env bash
# Set up .venv, then lint, type-check and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
# The scale-out tests need Redis (127.0.0.1:6379, or a redis-server binary they start) and start
# their own PostgreSQL + pgvector from the pgserver wheel (installed by setup.sh).
if ! command -v redis-server >/dev/null && ! (exec 3<>/dev/tcp/127.0.0.1/6379) 2>/dev/null; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing redis-server (apt)"
    apt-get install -y -q redis-server >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q redis-server >/dev/null; }
  fi
fi
# The inspector's browser tests (tests/ui) need Chromium: Debian's chromium package (Playwright
# drives it with executable_path; its own browser download is impossible offline).
if [ ! -x /usr/bin/chromium ] && [ -z "${MEMLANE_CHROMIUM:-}" ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "== installing chromium (apt)"
    apt-get install -y -q chromium >/dev/null || { apt-get update -q >/dev/null && apt-get install -y -q chromium >/dev/null; }
  fi
fi
export OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1} OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
echo "== ruff"
.venv/bin/ruff check src tests bench examples scripts
.venv/bin/ruff format --check src tests bench examples scripts
echo "== mypy"
.venv/bin/mypy
echo "== pytest"
# Two worker processes (pytest-xdist), one per core: much of the suite waits on child processes,
# servers and I/O, so the second core would otherwise sit idle. --dist loadscope keeps each test
# module (and its module-scoped fixtures) whole in one worker; --no-loadscope-reorder hands the
# modules out in collection order (not biggest first), so tests/ui, sorted last, still runs after
# every other test of its worker. MEMLANE_TEST_WORKERS=0 runs everything in this one process.
.venv/bin/python -m pytest -n "${MEMLANE_TEST_WORKERS:-2}" --dist loadscope --no-loadscope-reorder "$@"
