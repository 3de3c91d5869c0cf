"""What ``xpert-gateway check --config <file>`` tells a newcomer about a config file, run
in-process (``cli.main``): key paths as the file has them (no pydantic union tags, list items by
id), the key meant for an unknown one, the file line of every problem, YAML errors in plain
words, warnings naming integrations by id, each schedule's next fires in its own time zone, and
whether the admin API is on."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gateway.runtime.cli import main

QUICKSTART_ISH = """\
experts:
  - id: echo
    kind: echo
    stepDelay: 400
integrations:
  - id: console
    platform: console
    xpertId: echo
    summaryWindowSecond: 1.5
  - id: lark-main
    platform: lark
    xpertId: echo
    appId: cli_x
"""


def check(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    path = tmp_path / "gateway.yaml"
    path.write_text(text)
    code = main(["check", "--config", str(path)])
    out = capsys.readouterr()
    return code, out.out, out.err


def test_schema_errors_name_the_key_as_written_the_key_meant_and_the_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = check(tmp_path, QUICKSTART_ISH, capsys)
    assert code == 1
    problems = [line.strip() for line in err.splitlines()[1:]]
    assert problems == [
        # not experts.0.echo.stepDelay: the file has no "echo:" key
        "experts[echo].stepDelay: unknown key; did you mean `stepDelayMs`? (line 4)",
        "integrations[console].summaryWindowSecond: unknown key; "
        "did you mean `summaryWindowSeconds`? (line 9)",
        "integrations[lark-main].appSecret: missing (this key is required) (line 10)",
    ]
    assert ".echo." not in err and ".lark." not in err


def test_cross_checks_and_unset_variables_have_the_same_form_and_a_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = """\
admin:
  token: ${XGW_TEST_UNSET_TOKEN}
experts:
  - id: echo
    kind: echo
integrations:
  - id: console
    platform: console
    xpertId: echo
    routes:
      - chatId: a
      - chatId: b
        xpertId: ghost
"""
    code, _, err = check(tmp_path, text, capsys)
    assert code == 1
    assert "admin.token: environment variable XGW_TEST_UNSET_TOKEN is not set (line 2)" in err
    assert (
        "integrations[console].routes[1].xpertId: 'ghost' names no expert (experts: echo) (line 13)"
    ) in err


def test_duplicate_ids_are_named_by_position(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = "experts:\n  - id: echo\n    kind: echo\n  - id: echo\n    kind: echo\n"
    code, _, err = check(tmp_path, text, capsys)
    assert code == 1
    assert "experts[1].id: duplicate id 'echo' (line 4)" in err


def test_an_unknown_top_level_key_and_platform_get_suggestions(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (
        "experts:\n  - {id: echo, kind: echo}\n"
        "integrations:\n  - {id: c, platform: lrak, xpertId: echo}\n"
        "schedule: []\n"
    )
    code, _, err = check(tmp_path, text, capsys)
    assert code == 1
    assert "schedule: unknown key; did you mean `schedules`? (line 5)" in err
    assert "integrations[c].platform: unknown platform 'lrak'" in err
    assert "did you mean `lark`? (line 4)" in err


@pytest.mark.parametrize(
    ("text", "where", "words"),
    [
        ("server:\n  host: 127.0.0.1\n  port 80\n", "line 3, column 3", "a key without its colon"),
        ("server:\n  host: a: b\n", "line 2, column 10", "needs quotes"),
        ("server:\n\thost: x\n", "line 2, column 1", "a tab: YAML indents with spaces"),
        ('server:\n  host: "abc\n  port: 1\n', "line 2, column 9", "never closed"),
        ("logging: {level: info\nexperts: []\n", "line 1, column 10", "never closed (add `}`)"),
        ("server:\n  host: x\n port: 1\n", "line 3, column 2", "indentation does not line up"),
    ],
)
def test_yaml_errors_say_in_plain_words_what_is_likely_wrong(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, where: str, words: str
) -> None:
    code, _, err = check(tmp_path, text, capsys)
    assert code == 1
    [line] = err.splitlines()
    assert line.startswith(f"error: {tmp_path / 'gateway.yaml'}, {where}: not valid YAML: "), line
    assert words in line
    assert "(the parser: " in line  # pyyaml's own words follow, for a search


def test_warnings_name_integrations_by_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = """\
server: {host: 0.0.0.0}
experts:
  - {id: echo, kind: echo, replyPrefix: replace-me}
integrations:
  - {id: web, platform: console, xpertId: echo, routes: [{chatId: a, model: gpt-4o}]}
"""
    code, _, err = check(tmp_path, text, capsys)
    assert code == 0, err
    assert "warning: integrations[web].routes[0].model: expert 'echo' (kind echo)" in err
    assert "the console (integrations[web]) listens on 0.0.0.0" in err
    assert "warning: experts[echo].replyPrefix: a placeholder" in err
    assert not re.search(r"integrations\.\d", err)


def test_schedules_show_their_next_fires_in_their_own_zone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = """\
experts: [{id: echo, kind: echo}]
integrations: [{id: c, platform: console, xpertId: echo, timezone: Asia/Tokyo}]
schedules:
  - {id: tokyo, integrationId: c, chatId: t, chatType: group, cron: "0 9 * * *", text: hi}
  - {id: ny, integrationId: c, chatId: t, chatType: group, cron: "30 8 * * *", text: hi,
     timezone: America/New_York}
"""
    code, out, err = check(tmp_path, text, capsys)
    assert code == 0, err
    tokyo = next(line for line in out.splitlines() if "tokyo:" in line)
    assert re.search(r"Asia/Tokyo .* next \S+T09:00:00\+09:00, then \S+T09:00:00\+09:00$", tokyo)
    ny = next(line for line in out.splitlines() if "ny:" in line)
    assert re.search(r"next \S+T08:30:00-0[45]:00, then \S+T08:30:00-0[45]:00$", ny), ny


def test_the_summary_says_whether_the_admin_api_is_on_and_where(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = "experts: [{id: echo, kind: echo}]\n"
    _, out, _ = check(tmp_path, base, capsys)
    assert "admin API: off (set admin.token to turn it on)\n" in out
    on = base + "server: {port: 8181}\nadmin: {token: a-long-enough-admin-token-1}\n"
    _, out, _ = check(tmp_path, on, capsys)
    assert "admin API: on at http://127.0.0.1:8181/v1.0 (bearer admin.token)\n" in out


def test_event_sources_are_named_by_their_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = """\
experts: [{id: echo, kind: echo}]
integrations:
  - id: c
    platform: console
    xpertId: echo
    events:
      - {source: github, secret: s3cret-value-1, chatId: t, chatType: group, xpertId: ghost}
"""
    code, _, err = check(tmp_path, text, capsys)
    assert code == 1
    assert "integrations[c].events[github].xpertId: names no expert (line 7)" in err


def test_platform_limits_above_the_published_ones_are_warned_and_bad_ones_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lark = """\
experts:
  - {id: echo, kind: echo}
integrations:
  - id: lark-main
    platform: lark
    xpertId: echo
    appId: cli_x
    appSecret: s3cret-value
    connectionMode: long_connection
    platformLimits: {callsPerSecond: 500, chatSendsPerSecond: 5, callsPerMonth: 10000%s}
"""
    code, _, err = check(tmp_path, lark % "", capsys)
    assert code == 0, err
    assert (
        "warning: integrations[lark-main].platformLimits.callsPerSecond: 500 is above lark's "
        "published 50; the platform refuses the calls past its own limit"
    ) in err
    assert "chatSendsPerSecond" not in err  # the published figure itself is fine
    code, _, err = check(tmp_path, lark % ", callsPerMinute: 0", capsys)
    assert code == 1
    assert "integrations[lark-main].platformLimits.callsPerMinute" in err
    code, _, err = check(tmp_path, lark % ", callsPerWeek: 9", capsys)
    assert code == 1 and "callsPerWeek" in err
