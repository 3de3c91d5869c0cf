"""``xpert-gateway check`` on the mistakes of a first config, as a subprocess: each problem on
the key that is wrong with that key's own line, what is wrong with the value (a cron hour 25, a
42-character ``encodingAesKey``), the experts there are for an expert id that names none, "did
you mean" for ``platform: feishu`` and a misspelt time zone, and pydantic's wording in plain
words (never a secret's value)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import cli, run_cli

FIRST_TRY = """\
experts:
  - {id: echo, kind: echo}
  - {id: writer, kind: echo}
integrations:
  - id: console
    platform: console
    xpertId: echo
    timezone: Asia/Shangai
  - id: fs
    platform: feishu
    xpertId: echo
  - id: wecom-app
    platform: wecom
    xpertId: echo
    corpId: ww0123456789abcdef
    agentId: 1000002
    corpSecret: s3cret-corp
    token: tok
    encodingAesKey: abcdefghijklmnopqrstuvwxyz0123456789ABCDEF
schedules:
  - id: morning
    integrationId: console
    chatId: team
    chatType: group
    cron: "0 25 * * *"
    text: good morning
"""

CROSS = """\
experts:
  - {id: echo, kind: echo}
  - {id: writer, kind: echo}
integrations:
  - id: console
    platform: console
    xpertId: echo
    routes:
      - chatId: team
        xpertId: reviewer
schedules:
  - id: morning
    integrationId: console
    chatId: team
    chatType: group
    cron: "0 9 * * *"
    text: good morning
    xpertId: reporter
"""


def test_each_problem_is_on_its_key_and_line_and_says_what_is_wrong(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(FIRST_TRY)
    result = run_cli("check", "--config", str(path))
    assert result.returncode == 1, result.stdout
    lines = result.stderr.splitlines()
    assert lines[0] == f"{path}: invalid configuration"
    assert [line.strip() for line in lines[1:]] == [
        "integrations[console].timezone: unknown time zone 'Asia/Shangai' "
        "(did you mean `Asia/Shanghai`?) (line 8)",
        "integrations[fs].platform: unknown platform 'feishu' (expected one of: 'console', "
        "'dingtalk', 'lark', 'wecom'); did you mean `lark`? (line 10)",
        "integrations[wecom-app].encodingAesKey: must be 43 characters (the EncodingAESKey of "
        "the app's callback settings); this one has 42 (line 19)",
        "schedules[morning].cron: cron '0 25 * * *' is not a valid cron expression: the hour "
        "25 is out of range 0-23 (line 25)",
    ]
    assert "Traceback" not in result.stderr and "s3cret" not in result.stderr


def test_an_expert_id_naming_none_lists_the_experts_there_are(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(CROSS)
    result = cli("check", "--config", str(path))
    assert result.returncode == 1
    problems = [line.strip() for line in result.stderr.splitlines()[1:]]
    assert problems == [
        "integrations[console].routes[0].xpertId: 'reviewer' names no expert "
        "(experts: echo, writer) (line 10)",
        "schedules[morning].xpertId: 'reporter' names no expert (experts: echo, writer) (line 18)",
    ]


@pytest.mark.parametrize(
    ("setting", "said"),
    [
        ("server: {port: 99999}", "server.port: must be at most 65535, not 99999 (line 1)"),
        ("runtime: {leaseSeconds: fast}", "runtime.leaseSeconds: must be a number, not 'fast'"),
        (
            "logging: {level: verbose}",
            "logging.level: must be one of debug, info, warning, error, not 'verbose'",
        ),
        (
            "logging: {level: infos}",
            "logging.level: must be one of debug, info, warning, error, not 'infos'; "
            "did you mean `info`?",
        ),
        ("redis: {keyPrefix: 12}", "redis.keyPrefix: must be text, not 12; put it in quotes"),
        ("server: {allowedHosts: gw.example.com}", "server.allowedHosts: must be a list"),
        ("dataDir: [a, b]", "dataDir: must be a path (text), not a list (line 1)"),
    ],
)
def test_pydantic_wording_becomes_plain_words(tmp_path: Path, setting: str, said: str) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text(f"{setting}\nexperts: [{{id: echo, kind: echo}}]\n")
    result = cli("check", "--config", str(path))
    assert result.returncode == 1
    assert said in result.stderr, result.stderr
    assert "Input should" not in result.stderr


def test_a_secret_that_is_wrong_is_described_never_repeated(tmp_path: Path) -> None:
    path = tmp_path / "gateway.yaml"
    path.write_text("admin: {token: [hunter2]}\nexperts: [{id: echo, kind: echo}]\n")
    result = cli("check", "--config", str(path))
    assert result.returncode == 1
    assert "admin.token: must be text (line 1)" in result.stderr, result.stderr
    assert "hunter2" not in result.stderr
