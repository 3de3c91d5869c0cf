"""Each platform's fake keeps the limits its adapter declares the platform publishes
(``published_limits``; the fakes: tests/fakes/limits.py, tests/fakes/wecom.py 3.), as a client
sees them over HTTP on a clock the test moves: one API takes its figure in its window, then the
platform's answer to a call over a limit, while another API takes calls; after the window it
takes calls again. One chat takes the per-chat figure, then no more (refused, or taken and
dropped as WeCom does), while another chat takes one; where no per-chat figure is published the
fake keeps none. The fake a test gets by default refuses a burst of calls of one API nothing.
(Each platform's refusal on the wire, and the figures no adapter declares — per message, per
card, the month's quota — are its own: tests/{lark,dingtalk}/test_fake_limits.py.)"""

from __future__ import annotations

from tests.support.clock import FakeClock
from tests.support.conformance import Harness

# The figures a fake keeps per second or minute; the hour's figures no test waits for.
KEPT = ("calls_per_second", "calls_per_minute", "chat_sends_per_second", "chat_sends_per_minute")
SHOWN = 100  # a published figure past this is shown at 3 a window (same rule, fewer calls)


async def test_the_fake_keeps_the_figures_the_adapter_publishes(platform_fake: Harness) -> None:
    platform = platform_fake
    figures = platform.fake_figures()
    published = platform.published().model_dump()
    assert {name: published[name] for name in figures} == figures
    assert {name for name in KEPT if published[name] is not None} <= set(figures)


async def test_one_api_takes_its_figure_in_its_window_then_is_throttled(
    platform_fake: Harness,
) -> None:
    platform = platform_fake
    clock = FakeClock(start=1_000_000)
    windows = platform.published().windows()
    if not windows:  # a platform that publishes no figure: its fake keeps none
        assert platform.fake_figures() == {}
        return
    [(figure, _), *_] = windows
    shown = figure if figure <= SHOWN else 3
    window = await platform.limit_fake(clock, per_api=None if figure <= SHOWN else shown)
    assert [await platform.call_api("a") for _ in range(shown)] == ["ok"] * shown
    assert await platform.call_api("a") == "throttled"
    assert await platform.call_api("b") == "ok"  # another API has its own
    clock.advance(int(window) - 1)
    assert await platform.call_api("a") == "throttled"  # the window is not over yet
    clock.advance(1)
    assert await platform.call_api("a") == "ok"
    assert len(platform.throttles()) == 2


async def test_one_chat_takes_the_published_figure_then_no_more(platform_fake: Harness) -> None:
    platform = platform_fake
    await platform.limit_fake(FakeClock(start=1_000_000))
    chat_windows = platform.published().chat_windows()
    if not chat_windows:  # none published: only the per-API figure applies
        assert [await platform.call_api("chat:c1") for _ in range(10)] == ["ok"] * 10
        return
    [(figure, _), *_] = chat_windows
    assert [await platform.call_api("chat:c1") for _ in range(figure)] == ["ok"] * figure
    assert await platform.call_api("chat:c1") in ("throttled", "dropped")
    assert await platform.call_api("chat:c2") == "ok"


async def test_the_fake_a_test_gets_refuses_a_burst_nothing(platform_fake: Harness) -> None:
    platform = platform_fake
    assert {await platform.call_api("a") for _ in range(60)} == {"ok"}
    assert platform.throttles() == []
