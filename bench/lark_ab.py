"""Same-run A/B of two trees' daemons under ``lark_ingest.py``: its ``--floor`` slot runs the plain
daemon of another worktree instead (that tree's venv and directory, its own key prefix on the same
private Redis), so ``daemon_over_floor`` is this tree's daemon over the other's, round by round,
interleaved with bare aiohttp and lark-oapi as usual. For "is it a regression": check an older
commit out (``git worktree add /work/wt-old <sha>``, its own ``.venv`` with ``pip install -e``)
and run this tree's bench against it; the bench, the fake Lark and the payloads are this tree's.

Usage: XGW_OTHER_TREE=/work/wt-old .venv/bin/python bench/lark_ab.py --floor [--answering]
           [--rounds 3] [--duration 8]   (any lark_ingest.py option; --floor is required)
``XGW_OTHER_OPTS`` (JSON) is merged into the other daemon's integration (e.g. to turn a setting
off in one of two runs of the same tree). The other daemon's figures are under ``floor``.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import lark_bench
import lark_ingest
import yaml

TREE = Path(os.environ.get("XGW_OTHER_TREE", "."))
Server = lark_bench.Server
_spawn = Server.spawn


def other_daemon(config: dict[str, Any], workdir: Path, cores: frozenset[int] | None) -> Server:
    other = copy.deepcopy(config)
    other["redis"]["keyPrefix"] = config["redis"]["keyPrefix"] + "o"
    other["integrations"][0].update(json.loads(os.environ.get("XGW_OTHER_OPTS", "{}")))
    path = workdir / "other.yaml"
    path.write_text(yaml.safe_dump(other))
    python = str(TREE / ".venv" / "bin" / "python")
    argv = [python, "-m", "gateway", "run", "--config", str(path)]
    return Server("floor", [*argv, "--port", str(lark_bench.free_port())], workdir, cores)


def daemon(
    config: dict[str, Any],
    workdir: Path,
    cores: frozenset[int] | None = None,
    *,
    floor: bool = False,
) -> Server:
    if floor:
        return other_daemon(config, workdir, cores)
    path = workdir / "daemon.yaml"
    path.write_text(yaml.safe_dump(config))
    argv = [*lark_bench.daemon_argv("daemon", path), "--port", str(lark_bench.free_port())]
    return Server("daemon", argv, workdir, cores)


def spawn(self: Server) -> subprocess.Popen[bytes]:
    """The other daemon starts in its own tree (``python -m gateway`` imports from there)."""
    if self.name != "floor":
        return _spawn(self)
    saved, lark_bench.ROOT = lark_bench.ROOT, TREE
    try:
        return _spawn(self)
    finally:
        lark_bench.ROOT = saved


async def forget_events(redis_url: str, prefix: str) -> None:
    await _forget(redis_url, prefix)
    await _forget(redis_url, prefix + "o")


_forget = lark_ingest.forget_events
if __name__ == "__main__":
    if "XGW_OTHER_TREE" not in os.environ or "--floor" not in sys.argv:
        raise SystemExit(__doc__)
    Server.daemon = staticmethod(daemon)  # type: ignore[assignment]
    Server.spawn = spawn  # type: ignore[method-assign]
    lark_ingest.forget_events = forget_events
    lark_ingest.main()
