"""Packaging checks that need no Docker engine: the Dockerfile, docker-compose.yml, the container
config and the CI entry point are read and cross-checked against the repository."""

from __future__ import annotations

import fnmatch
import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
COMPOSE = ROOT / "docker-compose.yml"
DOCKER_CONFIG = ROOT / "config" / "gateway.docker.yaml"
README = ROOT / "README.md"
CI_RUN = ROOT / ".ci" / "run"
# The planned test command; README.md and .ci/run must both state it.
TEST_COMMAND = "./dev.sh test"


# --- a small Dockerfile reader ---------------------------------------------------------------
@dataclass
class Instruction:
    keyword: str
    args: str
    line: int


@dataclass
class Stage:
    base: str
    name: str | None
    instructions: list[Instruction] = field(default_factory=list)

    def all(self, keyword: str) -> list[Instruction]:
        return [i for i in self.instructions if i.keyword == keyword]


def parse_dockerfile(text: str) -> list[Stage]:
    """Split into stages of instructions, joining ``\\`` continuations and dropping comments."""
    logical: list[tuple[int, str]] = []
    buf: list[str] = []
    start = 0
    for n, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):
            continue  # comment lines inside a continued instruction are ignored by Docker
        if not buf:
            start = n
        if stripped.endswith("\\"):
            buf.append(stripped[:-1].strip())
            continue
        buf.append(stripped)
        logical.append((start, " ".join(p for p in buf if p)))
        buf = []
    assert not buf, "Dockerfile ends inside a continued line"
    stages: list[Stage] = []
    for n, line in logical:
        keyword, _, args = line.partition(" ")
        keyword = keyword.upper()
        if keyword == "FROM":
            words = args.split()
            words = [w for w in words if not w.startswith("--")]
            name = words[2] if len(words) >= 3 and words[1].upper() == "AS" else None
            stages.append(Stage(base=words[0], name=name))
            continue
        assert stages, f"line {n}: {keyword} before the first FROM"
        stages[-1].instructions.append(Instruction(keyword, args.strip(), n))
    return stages


def split_args(args: str) -> tuple[dict[str, str], list[str]]:
    """``--flag=value`` options and the remaining words (JSON or shell form)."""
    flags: dict[str, str] = {}
    rest = args
    while rest.startswith("--"):
        word, _, rest = rest.partition(" ")
        key, _, value = word[2:].partition("=")
        flags[key] = value
        rest = rest.lstrip()
    if rest.startswith("["):
        words = json.loads(rest)
        assert isinstance(words, list)
        return flags, [str(w) for w in words]
    return flags, shlex.split(rest)


def exec_form(instruction: Instruction) -> list[str]:
    words = json.loads(instruction.args)
    assert isinstance(words, list), f"line {instruction.line}: expected the JSON (exec) form"
    return [str(w) for w in words]


@pytest.fixture(scope="module")
def stages() -> list[Stage]:
    assert DOCKERFILE.is_file(), "Dockerfile is missing"
    return parse_dockerfile(DOCKERFILE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def final(stages: list[Stage]) -> Stage:
    return stages[-1]


def context_copies(stages: list[Stage]) -> list[tuple[Stage, Instruction, list[str], str]]:
    """Every COPY/ADD that reads the build context: (stage, instruction, sources, dest)."""
    found = []
    for stage in stages:
        for ins in stage.instructions:
            if ins.keyword not in ("COPY", "ADD"):
                continue
            flags, words = split_args(ins.args)
            if "from" in flags:
                continue  # copies from another stage or image, not the repository
            assert len(words) >= 2, f"line {ins.line}: {ins.keyword} needs a source and a dest"
            found.append((stage, ins, words[:-1], words[-1]))
    return found


# --- Dockerfile ------------------------------------------------------------------------------
def test_dockerfile_is_multi_stage(stages: list[Stage]) -> None:
    assert len(stages) >= 2, "expected a builder stage and a runtime stage"
    assert all(s.base.startswith("python:3.11") for s in stages), [s.base for s in stages]
    names = [s.name for s in stages if s.name]
    assert len(names) == len(set(names)), f"duplicate stage names: {names}"


def test_copy_sources_exist(stages: list[Stage]) -> None:
    copies = context_copies(stages)
    assert copies, "the Dockerfile copies nothing from the repository"
    for _stage, ins, sources, _dest in copies:
        for src in sources:
            assert not src.startswith(("http://", "https://")), f"line {ins.line}: remote {src}"
            matches = (
                list(ROOT.glob(src.rstrip("/")))
                if any(c in src for c in "*?[")
                else [ROOT / src.rstrip("/")]
            )
            assert matches and all(m.exists() for m in matches), (
                f"line {ins.line}: COPY source {src!r} does not exist in the repository"
            )


def test_copy_sources_not_dockerignored(stages: list[Stage]) -> None:
    ignore = ROOT / ".dockerignore"
    if not ignore.exists():
        return
    patterns = [
        p.strip().rstrip("/")
        for p in ignore.read_text(encoding="utf-8").splitlines()
        if p.strip() and not p.strip().startswith(("#", "!"))
    ]
    for _stage, ins, sources, _dest in context_copies(stages):
        for src in sources:
            path = src.rstrip("/").removeprefix("./")
            for pat in patterns:
                assert not fnmatch.fnmatch(path, pat.removeprefix("./")), (
                    f"line {ins.line}: COPY source {src!r} is excluded by .dockerignore ({pat!r})"
                )


def test_the_image_installs_exactly_the_lock(stages: list[Stage]) -> None:
    """The builder installs the pinned uv with its hashes, then ``uv sync --locked`` from the
    committed ``uv.lock`` (both copied in), without the test tools; the runtime stage gets only
    the environment it made, as ``./dev.sh run`` and the suite install the same lock."""
    builder = stages[:-1]
    runs = [i.args for s in builder for i in s.all("RUN")]
    copied = " ".join(i.args for s in builder for i in s.all("COPY"))
    assert any("--require-hashes -r requirements-uv.txt" in r for r in runs), runs
    syncs = [r for r in runs if r.startswith("uv sync")]
    assert syncs and all("--locked" in r and "--no-dev" in r for r in syncs), syncs
    assert "uv.lock" in copied and "requirements-uv.txt" in copied
    assert not any("pip install" in r and "requirements-uv.txt" not in r for r in runs), runs
    final_copies = [i.args for i in stages[-1].all("COPY")]
    assert any(c.startswith("--from=builder /opt/venv") for c in final_copies), final_copies


def test_final_stage_runs_as_non_root(final: Stage) -> None:
    users = final.all("USER")
    assert users, "the final stage has no USER, so it runs as root"
    user = users[-1].args.split(":")[0].strip()
    # The last USER is the one the container runs as.
    assert user and user not in ("root", "0"), f"the final stage runs as {user!r}"


def test_healthcheck_hits_healthz(final: Stage) -> None:
    checks = final.all("HEALTHCHECK")
    assert checks, "the final stage has no HEALTHCHECK"
    args = checks[-1].args
    assert "/healthz" in args
    assert "curl" not in args and "wget" not in args, "python:3.11-slim has neither curl nor wget"
    assert "8080" in args


def test_exposes_8080_and_entrypoint(final: Stage) -> None:
    exposed = " ".join(i.args for i in final.all("EXPOSE")).split()
    assert "8080" in exposed or "8080/tcp" in exposed
    (entry,) = final.all("ENTRYPOINT")
    assert exec_form(entry) == ["xpert-gateway"]


def _container_to_repo(final: Stage, container_path: str) -> Path | None:
    """Map a path inside the image back to the repository file COPY put there."""
    workdir = PurePosixPath("/")
    target = PurePosixPath(container_path)
    mapped: Path | None = None
    for ins in final.instructions:
        if ins.keyword == "WORKDIR":
            workdir = workdir / ins.args.strip()
        if ins.keyword not in ("COPY", "ADD"):
            continue
        flags, words = split_args(ins.args)
        if "from" in flags:
            continue
        dest = workdir / words[-1]
        for src in words[:-1]:
            src_dir = src.endswith("/") or (ROOT / src).is_dir()
            if src_dir and (target == dest or dest in target.parents):
                mapped = ROOT / src / target.relative_to(dest)
            elif not src_dir and target in (dest, dest / PurePosixPath(src).name):
                mapped = ROOT / src
    return mapped


def test_cmd_config_file_exists(final: Stage) -> None:
    (cmd,) = final.all("CMD")
    words = exec_form(cmd)
    assert words[0] == "run"
    assert "--config" in words
    container_path = words[words.index("--config") + 1]
    repo_path = _container_to_repo(final, container_path)
    assert repo_path is not None, f"no COPY puts {container_path} into the image"
    assert repo_path.is_file(), f"{container_path} comes from {repo_path}, which does not exist"
    assert repo_path.resolve() == DOCKER_CONFIG.resolve()


# --- the container config ---------------------------------------------------------------------
def test_docker_config_validates() -> None:
    from gateway.config.file import load_settings
    from gateway.runtime.cli import settings_model

    settings = load_settings(DOCKER_CONFIG, model=settings_model(), env={})
    assert settings.server.host == "0.0.0.0"
    assert settings.server.port == 8080
    assert settings.redis.url is not None
    assert settings.redis.url.get_secret_value() == "redis://redis:6379/0"
    assert str(settings.data_dir) == "/app/data"
    assert any(i.platform == "console" for i in settings.integrations)

    override = load_settings(
        DOCKER_CONFIG, model=settings_model(), env={"REDIS_URL": "redis://elsewhere:6380/1"}
    )
    assert override.redis.url is not None
    assert override.redis.url.get_secret_value() == "redis://elsewhere:6380/1"


# --- docker-compose.yml -----------------------------------------------------------------------
def test_compose_file() -> None:
    doc = yaml.safe_load(COMPOSE.read_text(encoding="utf-8"))
    services = doc["services"]
    assert {"redis", "gateway"} <= set(services)
    assert str(services["redis"]["image"]).startswith("redis:")
    redis_test = services["redis"]["healthcheck"]["test"]
    assert "ping" in (redis_test if isinstance(redis_test, str) else " ".join(redis_test))

    gateway = services["gateway"]
    build = gateway["build"]
    context = build if isinstance(build, str) else build.get("context", ".")
    dockerfile = "Dockerfile" if isinstance(build, str) else build.get("dockerfile", "Dockerfile")
    assert (ROOT / context).is_dir(), f"build context {context!r} does not exist"
    assert (ROOT / context / dockerfile).is_file()
    assert any(str(p).split(":")[-1] == "8080" for p in gateway["ports"])

    env = gateway["environment"]
    if isinstance(env, list):
        env = dict(e.split("=", 1) for e in env)
    assert env["REDIS_URL"] == "redis://redis:6379/0"
    depends = gateway["depends_on"]
    assert "redis" in depends
    if isinstance(depends, dict):
        assert depends["redis"].get("condition") == "service_healthy"


# --- CI entry point and README agree ----------------------------------------------------------
def _commands(text: str) -> list[str]:
    """Non-comment lines, without a leading ``$ `` prompt or a trailing ``# comment``."""
    lines = []
    for raw in text.splitlines():
        line = re.sub(r"\s+#.*$", "", raw.strip().removeprefix("$ ")).strip()
        if line and not line.startswith("#"):
            lines.append(line)
    return lines


def _fenced_lines(markdown: str) -> list[str]:
    lines: list[str] = []
    for block in re.findall(r"^```[^\n]*\n(.*?)^```", markdown, flags=re.M | re.S):
        lines += _commands(block)
    return lines


def test_ci_runs_the_readme_test_command() -> None:
    assert README.is_file(), "README.md is missing"
    assert CI_RUN.is_file(), ".ci/run is missing"
    readme_tests = [
        line for line in _fenced_lines(README.read_text(encoding="utf-8")) if "test" in line
    ]
    assert TEST_COMMAND in readme_tests, (
        f"README.md states no fenced `{TEST_COMMAND}`; its test lines: {readme_tests}"
    )
    ci_lines = _commands(CI_RUN.read_text(encoding="utf-8"))
    assert any(
        line == TEST_COMMAND
        or re.search(rf"(^|[;&|]\s*|exec\s+){re.escape(TEST_COMMAND)}(\s|$)", line)
        for line in ci_lines
    ), f".ci/run does not run `{TEST_COMMAND}`"
    script = ROOT / TEST_COMMAND.split()[0]
    assert script.is_file(), f"{script.name} is missing"
