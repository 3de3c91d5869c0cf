"""Images and files out (gateway/edge/media.py): an answer's Markdown is not a trusted URL.
Only the expert's own origin and its ``mediaHosts`` are fetched from, https unless local, no
redirect off them, each body and the counts capped, the whole fetch bounded in time; what is
not fetched stays a plain link."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from pydantic import ValidationError
from structlog.testing import capture_logs
from yarl import URL

from gateway.config.model import media_host
from gateway.edge.media import MediaCaps, MediaSources, fetch_media, find, shown
from gateway.experts.openai import OpenAIExpertSettings
from tests.fakes.media import PDF, PNG, FakeMediaHost


@pytest.fixture
async def own() -> AsyncIterator[FakeMediaHost]:
    async for host in FakeMediaHost().run():
        yield host


@pytest.fixture
async def other() -> AsyncIterator[FakeMediaHost]:
    async for host in FakeMediaHost().run():
        yield host


def test_images_and_file_links_are_found_outside_code() -> None:
    answer = (
        'See ![chart](https://x.example/c.png "Q3") and [the report](https://x.example/r.pdf),'
        " [a page](https://x.example/about), `![no](https://x.example/inline.png)`\n"
        "```\n![no](https://x.example/fenced.png)\n```\n![chart again](https://x.example/c.png)"
    )
    refs = [(r.kind, r.alt, r.url) for r in find(answer)]
    assert refs == [
        ("image", "chart", "https://x.example/c.png"),
        ("file", "the report", "https://x.example/r.pdf"),
    ]


def test_an_image_not_fetched_is_shown_as_a_plain_link_and_code_is_left_alone() -> None:
    answer = "![a](https://x/a.png) ![](https://x/b.png) `![c](https://x/c.png)`"
    out = shown(answer, {"https://x/a.png": "img_v3_a"})
    assert out == "![a](img_v3_a) [image](https://x/b.png) `![c](https://x/c.png)`"
    assert shown(answer) == "[a](https://x/a.png) [image](https://x/b.png) `![c](https://x/c.png)`"


def test_plain_http_is_allowed_only_to_a_local_host() -> None:
    sources = MediaSources.of(["files.example.com", "https://cdn.example.com:8443"])
    assert sources.allows(URL("https://files.example.com/a.png"))
    assert not sources.allows(URL("http://files.example.com/a.png"))
    assert not sources.allows(URL("https://files.example.com:8443/a.png"))  # another port
    assert sources.allows(URL("https://cdn.example.com:8443/a.png"))
    assert not sources.allows(URL("https://cdn.example.com/a.png"))
    assert not sources.allows(URL("https://user@files.example.com/a.png"))
    assert not sources.allows(URL("ftp://files.example.com/a.png"))
    # an expert's own origin over plain http to a host that is not local is not a source
    assert not MediaSources.of(["http://xpert.internal:3000"])
    assert MediaSources.of(["http://127.0.0.1:3000"]).allows(URL("http://127.0.0.1:3000/a.png"))
    for bad in ("http://files.example.com", "files.example.com/path", "https://x?q=1"):
        with pytest.raises(ValueError):
            media_host(bad)


def test_the_config_refuses_a_media_host_that_is_not_one() -> None:
    base = {"id": "gpt", "kind": "openai", "baseUrl": "https://api.example.com/v1", "model": "m"}
    ok = OpenAIExpertSettings.model_validate({**base, "mediaHosts": ["files.example.com"]})
    assert ok.media_hosts == ["files.example.com"]
    with pytest.raises(ValidationError, match="plain http only to a local host"):
        OpenAIExpertSettings.model_validate({**base, "mediaHosts": ["http://files.example.com"]})


async def test_only_allowed_origins_are_fetched(own: FakeMediaHost, other: FakeMediaHost) -> None:
    own.files["/chart.png"] = (PNG, "image/png")
    own.files["/report.pdf"] = (PDF, "application/octet-stream")
    other.files["/x.png"] = (PNG, "image/png")
    answer = f"![chart]({own.url}/chart.png) ![x]({other.url}/x.png) [r]({own.url}/report.pdf)"
    media = await fetch_media(answer, MediaSources.of([own.url]))
    assert [(m.kind, m.alt, m.mime, m.name) for m in media] == [
        ("image", "chart", "image/png", "chart.png"),
        ("file", "r", "application/pdf", "report.pdf"),  # the name tells what bytes are
    ]
    assert media[0].data == PNG and media[1].data == PDF
    assert other.hits == []  # never asked
    # a mediaHosts entry opens the other host
    media = await fetch_media(answer, MediaSources.of([own.url, other.url.split("://")[1]]))
    assert [m.alt for m in media] == ["chart", "x", "r"]


async def test_a_redirect_is_followed_only_while_it_stays_allowed(
    own: FakeMediaHost, other: FakeMediaHost
) -> None:
    own.files["/chart.png"] = (PNG, "image/png")
    own.redirects["/moved.png"] = "/chart.png"
    own.redirects["/away.png"] = f"{other.url}/x.png"
    other.files["/x.png"] = (PNG, "image/png")
    answer = f"![moved]({own.url}/moved.png) ![away]({own.url}/away.png)"
    with capture_logs() as logs:
        media = await fetch_media(answer, MediaSources.of([own.url]))
    assert [m.alt for m in media] == ["moved"]
    # one line for the one refused, naming the host it was sent to and why; no URL path
    [line] = [e for e in logs if e["event"] == "media left as a link"]
    assert line["host"] == "127.0.0.1" and line["reason"] == "redirected off"
    assert "away.png" not in str(line)
    own.redirects["/loop.png"] = "/loop.png"
    with capture_logs() as logs:
        assert await fetch_media(f"![l]({own.url}/loop.png)", MediaSources.of([own.url])) == ()
    [line] = [e for e in logs if e["event"] == "media left as a link"]
    assert line["reason"] == "redirected too often"
    assert own.hits.count("/loop.png") == 4  # the first request and three redirects
    assert other.hits == []  # the redirect off the origin was not followed
    assert shown(answer, {m.url: "k" for m in media}).endswith(f"[away]({own.url}/away.png)")


async def test_sizes_counts_and_time_are_capped(own: FakeMediaHost) -> None:
    own.files["/big.png"] = (PNG + b"\x00" * 2000, "image/png")
    own.files["/small.png"] = (PNG, "image/png")
    own.files["/page.png"] = (b"<html>not an image</html>", "image/png")
    own.stall.add("/slow.png")
    sources = MediaSources.of([own.url])
    caps = MediaCaps(image_bytes=1000, images=3, total_s=1.0)
    answer = " ".join(
        f"![{n}]({own.url}/{n}.png)" for n in ("big", "small", "page", "slow", "extra")
    )
    media = await fetch_media(answer, sources, caps=caps)
    assert [m.alt for m in media] == ["small"]  # big: too large; page: not an image
    assert "/slow.png" not in own.hits and "/extra.png" not in own.hits  # past the count
    caps = MediaCaps(total_s=0.5)
    media = await fetch_media(
        f"![s]({own.url}/slow.png) ![ok]({own.url}/small.png)", sources, caps=caps
    )
    assert [m.alt for m in media] == ["ok"]  # the stalled one ran out of time, the other came
    files = " ".join(f"[f{i}]({own.url}/f{i}.pdf)" for i in range(3))
    for i in range(3):
        own.files[f"/f{i}.pdf"] = (PDF, "application/pdf")
    media = await fetch_media(files, sources, caps=MediaCaps(files=2))
    assert [m.alt for m in media] == ["f0", "f1"]


async def test_a_file_link_that_answers_with_a_web_page_stays_a_link(own: FakeMediaHost) -> None:
    """A sign-in or error page served where the file was (an XpertAI artifact link that wants a
    session answers 302 to its own sign-in page, ``artifacts/artifacts.controller.ts:77-93`` at
    5135ce25) is not sent as ``report.pdf``."""
    own.files["/report.pdf"] = (b"<!DOCTYPE html><html>Sign in</html>", "text/html; charset=utf-8")
    own.files["/sheet.xlsx"] = (b"\n  <HTML><body>Not found</body></HTML>", "")
    own.files["/notes.txt"] = (b"<html> is how a page starts", "text/plain")
    own.files["/ok.pdf"] = (PDF, "application/pdf")
    answer = " ".join(f"[{n[1:]}]({own.url}{n})" for n in own.files)
    with capture_logs() as logs:
        media = await fetch_media(answer, MediaSources.of([own.url]))
    assert [m.name for m in media] == ["notes.txt", "ok.pdf"]
    refused = [e for e in logs if e["event"] == "media left as a link"]
    assert [e["reason"] for e in refused] == ["a web page", "a web page"]  # they stay links
