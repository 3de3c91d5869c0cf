"""The app's platform budget as each replica's calls see it (gateway/edge/call_budget.py), on a
real Redis: calls granted in priority order (first card, final, click, other, update), two
replicas sharing one limit, a throttle answer pausing every replica, a busy chat not holding up
another, the month's quota with its card modes and refunds, intermediate updates taking their
slots stalest card first, and a store that cannot be reached opening the budget."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import redis.asyncio as aioredis

from adapters.console.settings import ConsoleIntegration
from adapters.dingtalk.settings import DingTalkIntegration
from adapters.lark.settings import LarkIntegration
from adapters.wecom.settings import WeComIntegration
from gateway.config.platform_limits import PlatformLimits, platform_defaults
from gateway.edge.call_budget import BudgetExhausted, CallBudget, Priority, calls_as, month_of
from sessions import KeyBuilder, PlatformBudgets, SessionStore
from tests.support.helpers import free_port
from tests.support.waits import eventually


@pytest.fixture
async def store(redis_client: aioredis.Redis, prefix: str) -> AsyncIterator[PlatformBudgets]:
    sessions = SessionStore(client=redis_client, keys=KeyBuilder(prefix=prefix))
    yield PlatformBudgets(store=sessions)
    await sessions.close()


@pytest.fixture
def make(store: PlatformBudgets) -> Callable[..., CallBudget]:
    def build(app: str = "lark:cli_t", **limits: Any) -> CallBudget:
        return CallBudget(
            store=store, app=app, integration_id="lark-t", limits=PlatformLimits(**limits)
        )

    return build


class Events:
    def __init__(self) -> None:
        self.waits: list[float] = []
        self.throttles: list[tuple[str, str]] = []
        self.modes: list[str] = []

    def budget_waited(self, integration_id: str, endpoint: str, seconds: float) -> None:
        self.waits.append(seconds)

    def budget_throttled(self, integration_id: str, endpoint: str, scope: str) -> None:
        self.throttles.append((endpoint, scope))

    def card_mode_changed(self, integration_id: str, mode: str) -> None:
        self.modes.append(mode)


def queued(budget: CallBudget, n: int) -> Callable[[], bool]:
    return lambda: budget.queued() == n


async def test_waiting_calls_are_granted_first_card_final_click_other_update(
    make: Callable[..., CallBudget],
) -> None:
    budget = make(calls_per_second=1)
    await budget.take("reply")  # the second's one call is spent
    granted: list[str] = []

    async def call(name: str, priority: Priority) -> None:
        with calls_as(priority):
            await budget.take("reply")
        granted.append(name)

    order = [
        ("update", Priority.UPDATE),
        ("other", Priority.OTHER),
        ("click", Priority.CLICK),
        ("final", Priority.FINAL),
        ("first", Priority.FIRST),
    ]
    tasks = []
    for name, priority in order:  # asked lowest first: each waits behind the spent second
        tasks.append(asyncio.create_task(call(name, priority)))
        await eventually(queued(budget, len(tasks)))
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=15)
    assert granted == ["first", "final", "click", "other", "update"]


async def test_two_replicas_share_one_limit(make: Callable[..., CallBudget]) -> None:
    one, two = make(calls_per_second=5), make(calls_per_second=5)
    loop = asyncio.get_running_loop()
    times: list[float] = []

    async def call(budget: CallBudget) -> None:
        await budget.take("patch")
        times.append(loop.time())

    await asyncio.wait_for(
        asyncio.gather(*(call(b) for b in [one, two] * 8)), timeout=15
    )  # 16 calls: 5 + 5 + 5 + 1 over three seconds at least
    times.sort()
    assert len(times) == 16
    for i in range(len(times) - 5):  # never six calls within one second, both replicas together
        assert times[i + 5] - times[i] >= 0.95


async def test_the_replica_whose_calls_asked_longest_ago_goes_first(
    store: PlatformBudgets,
) -> None:
    """Each replica its own store (its own place in the line); the second's clock says its
    calls asked 10 s before the first's, so at the room's return its call goes first, whichever
    replica happens to ask first (issue 38: one replica lost that race again and again)."""
    limits = PlatformLimits(calls_per_second=1)
    late = CallBudget(store=store, app="lark:cli_t", integration_id="a", limits=limits)
    early = CallBudget(
        store=PlatformBudgets(store=store.store), app="lark:cli_t", integration_id="b",
        limits=limits, wall=lambda: time.time() - 10,
    )  # fmt: skip
    await late.take("reply")  # the second's one call is spent
    granted: list[str] = []

    async def call(name: str, budget: CallBudget) -> None:
        await budget.take("reply")
        granted.append(name)

    tasks = [asyncio.create_task(call("late", late))]
    await eventually(queued(late, 1))
    tasks.append(asyncio.create_task(call("early", early)))
    await eventually(queued(early, 1))
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=10)
    assert granted == ["early", "late"]


async def test_a_throttle_answer_pauses_the_api_for_every_replica(
    make: Callable[..., CallBudget], store: PlatformBudgets
) -> None:
    events = Events()
    one, two = make(calls_per_second=50), make(calls_per_second=50)
    one.events = events
    assert await one.throttled("reply", 0.6, "api") is True
    assert events.throttles == [("reply", "api")]
    assert await store.paused_for("lark:cli_t", "api:reply") > 0.3
    loop = asyncio.get_running_loop()
    began = loop.time()
    await asyncio.wait_for(two.take("reply"), timeout=5)  # the other replica waits it out
    assert await store.paused_for("lark:cli_t", "api:reply") == 0
    assert loop.time() - began > 0.2
    await asyncio.wait_for(two.take("patch"), timeout=1)  # another API is not paused


async def test_a_chat_limit_pauses_that_chats_sends_only(make: Callable[..., CallBudget]) -> None:
    budget = make(chat_sends_per_second=1)
    with calls_as(Priority.FIRST, chat="oc_busy"):
        await budget.take("reply", chat_send=True)
        waiting = asyncio.create_task(budget.take("reply", chat_send=True))
        await eventually(lambda: budget.queued() == 1)
    with calls_as(Priority.FIRST, chat="oc_quiet"):
        await asyncio.wait_for(budget.take("reply", chat_send=True), timeout=1)
    await asyncio.wait_for(waiting, timeout=5)
    # 230020 on one message's PATCH (not a chat send) pauses nothing shared.
    with calls_as(Priority.UPDATE):
        assert await budget.throttled("patch", None, "chat") is False


async def test_the_month_quota_sets_the_card_mode_and_then_refuses(
    make: Callable[..., CallBudget],
) -> None:
    events = Events()
    budget = make(calls_per_month=20)
    budget.events = events
    for _ in range(15):
        await budget.take("reply")
    assert budget.month_used == 15 and budget.forecast_s is not None
    assert budget.mode == "lean" and budget.interval_factor() == 4.0  # 75 %: runs out early
    for _ in range(4):
        await budget.take("reply")
    assert budget.mode == "finals" and budget.interval_factor() is None  # 95 %
    await budget.refused()  # a refused call does not count
    assert budget.month_used == 18
    await budget.take("reply")
    await budget.take("reply")
    with pytest.raises(BudgetExhausted, match="month quota spent"):
        await budget.take("reply")
    assert events.modes == ["lean", "finals"]
    other = make(app="lark:cli_other", calls_per_month=20)  # another app's month is its own
    await other.take("reply")
    assert other.month_used == 1 and other.mode == "normal"


def test_the_quota_month_starts_at_midnight_of_its_offset() -> None:
    label, start, end = month_of(1_780_000_000, 8)  # 2026-05-28 20:26 UTC, 04:26 +08 the 29th
    assert label == "2026-05"
    assert (end - start) / 86400 == 31
    assert month_of(start - 1, 8)[0] == "2026-04"
    assert month_of(end, 8)[0] == "2026-06"
    assert month_of(1_798_761_600 - 3600, 8)[0] == "2027-01"  # 2026-12-31 23:00 UTC
    assert month_of(1_798_761_600 - 3600, 0)[0] == "2026-12"


async def test_intermediate_updates_take_their_slots_stalest_card_first(
    store: PlatformBudgets,
) -> None:
    budget = CallBudget(
        store=store,
        app="lark:cli_s",
        integration_id="lark-s",
        limits=PlatformLimits(calls_per_second=100),
        update_slots=1,
    )
    order: list[float] = []
    hold = asyncio.Event()

    async def update(shown_at: float, wait: bool = False) -> None:
        async with budget.update_slot(shown_at):
            order.append(shown_at)
            await budget.take("patch")
            if wait:
                await hold.wait()

    first = asyncio.create_task(update(9.0, wait=True))
    await eventually(lambda: order == [9.0])
    rest = [asyncio.create_task(update(at)) for at in (5.0, 1.0, 3.0)]
    await eventually(lambda: budget.queued() == 3)
    cancelled = asyncio.create_task(update(0.5))  # the stalest, but its card ended meanwhile
    await eventually(lambda: budget.queued() == 4)
    cancelled.cancel()
    hold.set()
    await asyncio.wait_for(asyncio.gather(first, *rest), timeout=5)
    assert order == [9.0, 1.0, 3.0, 5.0]
    async with budget.update_slot(0.0):  # every slot came back
        pass


async def test_a_store_that_cannot_be_reached_lets_calls_go_unpaced() -> None:
    client = aioredis.Redis(port=free_port(), socket_connect_timeout=0.2)
    sessions = SessionStore(client=client, keys=KeyBuilder(prefix="xgw-unreachable"))
    budget = CallBudget(
        store=PlatformBudgets(store=sessions),
        app="lark:cli_u",
        integration_id="lark-u",
        limits=PlatformLimits(calls_per_second=1),
    )
    try:
        for _ in range(3):  # over the limit, and not held up
            await asyncio.wait_for(budget.take("reply"), timeout=5)
    finally:
        await sessions.close()


def test_the_published_limits_are_the_defaults_and_each_can_be_overridden() -> None:
    lark = platform_defaults(LarkIntegration)  # each adapter declares its platform's
    assert lark.api_windows("reply") == [(50, 1.0), (1000, 60.0)]
    assert lark.chat_windows() == [(5, 1.0)]
    assert lark.api_windows("card_stream") == [(50, 1.0), (1000, 60.0)]  # metered: the safe reading
    streaming = PlatformLimits.model_validate({"unmeteredApis": ["card_stream"]}).over(lark)
    assert streaming.api_windows("card_stream") == []
    assert platform_defaults(DingTalkIntegration).api_windows("group_send") == [(20, 1.0)]
    assert platform_defaults(WeComIntegration).chat_windows() == [(30, 60.0), (1000, 3600.0)]
    assert not platform_defaults(ConsoleIntegration).enabled  # declared: nothing to pace
    own = PlatformLimits.model_validate(
        {"callsPerSecond": 10, "callsPerMonth": 10000, "apis": {"patch": {"callsPerSecond": 3}}}
    ).over(lark)
    assert own.api_windows("reply") == [(10, 1.0), (1000, 60.0)]
    assert own.api_windows("patch") == [(3, 1.0)]
    assert own.calls_per_month == 10000 and own.chat_windows() == [(5, 1.0)]
    lifted = PlatformLimits.model_validate({"callsPerMinute": None}).over(lark)
    assert lifted.api_windows("reply") == [(50, 1.0)]


async def test_intermediate_updates_leave_a_quarter_of_each_window_to_first_cards_and_finals(
    make: Callable[..., CallBudget],
) -> None:
    budget = make(calls_per_second=4, calls_per_minute=None)
    with calls_as(Priority.UPDATE):
        for _ in range(3):
            await budget.take("patch")
        held = asyncio.create_task(budget.take("patch"))  # the fourth update waits
        await eventually(lambda: budget.queued() == 1)
    with calls_as(Priority.FINAL):
        await asyncio.wait_for(budget.take("patch"), timeout=0.5)  # a final state does not
    await asyncio.wait_for(held, timeout=5)


async def test_intermediate_updates_hold_back_while_a_first_card_waits(
    make: Callable[..., CallBudget],
) -> None:
    budget = make(calls_per_second=1, calls_per_minute=None)
    await budget.take("reply")
    assert not budget.holding_back()
    with calls_as(Priority.FIRST, chat="oc_new"):
        first = asyncio.create_task(budget.take("reply"))
        await eventually(lambda: budget.holding_back())  # somebody waits for any card at all
    await asyncio.wait_for(first, timeout=5)
    assert not budget.holding_back()


async def test_intermediate_updates_spread_a_minutes_share_over_the_minute(
    make: Callable[..., CallBudget],
) -> None:
    """Of 120 calls a minute, updates may take 90, but at most 7 in any 5 s (a twelfth): the
    share is not spent in the minute's first seconds, leaving the finals of the cards live now
    room at its end (issue 38). Other calls see the whole minute."""
    budget = make(calls_per_second=None, calls_per_minute=120)
    with calls_as(Priority.UPDATE):
        for _ in range(7):
            await budget.take("patch")
        held = asyncio.create_task(budget.take("patch"))  # the eighth waits for the next part
        await eventually(lambda: budget.queued() == 1)
    with calls_as(Priority.FINAL):
        for _ in range(20):
            await asyncio.wait_for(budget.take("patch"), timeout=0.5)  # finals do not wait
    assert not held.done()
    held.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await held
