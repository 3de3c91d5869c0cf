"""The lock the README's two commands install from (docs/testing.md, "The lock"): committed
fresh, and a stale one stops ``dev.sh`` with one line saying how to re-lock."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
UV = ROOT / ".uv" / "bin" / "uv"

needs_uv = pytest.mark.skipif(not UV.exists(), reason="no .uv/bin/uv: run through ./dev.sh test")


def _env() -> dict[str, str]:
    return {**os.environ, "UV_PYTHON_DOWNLOADS": "never", "NO_COLOR": "1"}


@needs_uv
def test_the_committed_lock_matches_pyproject() -> None:
    done = subprocess.run(
        [str(UV), "lock", "--check"], cwd=ROOT, capture_output=True, text=True, env=_env()
    )
    assert done.returncode == 0, done.stderr


@needs_uv
def test_a_stale_lock_stops_dev_sh_with_one_line_saying_how_to_relock(tmp_path: Path) -> None:
    for name in ("dev.sh", "uv.lock", "requirements-uv.txt", "README.md", "LICENSE"):
        shutil.copy2(ROOT / name, tmp_path / name)
    (tmp_path / ".uv").symlink_to(ROOT / ".uv", target_is_directory=True)
    pyproject = (ROOT / "pyproject.toml").read_text()
    # A dependency added by hand, the lock not re-made: what a contributor does first.
    stale = pyproject.replace("dependencies = [\n", 'dependencies = [\n  "six>=1.16",\n', 1)
    assert stale != pyproject
    (tmp_path / "pyproject.toml").write_text(stale)
    done = subprocess.run(
        ["bash", "dev.sh", "run", "--help"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**_env(), "XGW_VENV": str(tmp_path / "venv")},
        timeout=120,
    )
    assert done.returncode == 1
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert lines[-1] == (
        "dev.sh: error: uv.lock is out of date with pyproject.toml; "
        "re-lock with './dev.sh lock' and commit uv.lock"
    ), done.stderr
    assert not (tmp_path / "venv" / "bin" / "xpert-gateway").exists()  # nothing installed
