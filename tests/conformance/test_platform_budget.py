"""Turns at a platform's real limits, end to end on every platform (the budget itself, shared
by the replicas: tests/sessions/test_platform_budget.py): a gateway whose ``platformLimits``
let it call each API 5 times a second, in front of a fake that refuses the sixth. Many people
writing at once get no throttle answer and every answer lands; a throttle answer the platform
gives anyway rests the API as long as the answer says, and the answer still lands. Where the
platform declares nothing of an answer paced (an AI bot's long connection), the many answers
land all the same. (Lark's replicas sharing a pause, and its month's quota thinning the card
updates: tests/lark/test_platform_budget.py.)"""

from __future__ import annotations

import pytest

from gateway.edge.capabilities import Capability
from tests.support.conformance import Harness
from tests.support.conformance.base import FAST_ECHO
from tests.support.waits import eventually

PER_API = 5


async def test_many_turns_at_once_get_no_throttle_answer_and_every_answer_lands(
    paced: Harness,
) -> None:
    platform = paced
    if platform.declares(Capability.PACED):
        assert await platform.limit_fake(per_api=PER_API) == 1000
    await platform.start(experts=[FAST_ECHO], platformLimits=platform.budget(PER_API))
    texts = [f"m{i}" for i in range(PER_API + 1)]
    for i, text in enumerate(texts):  # more people at once than an API takes calls a second
        await platform.send(text, user=f"s{i}")

    def landed(text: str) -> bool:
        return any("You said:" in shown and f"> {text}" in shown for shown in platform.shown())

    await eventually(lambda: all(landed(text) for text in texts), timeout=60)
    await platform.idle()
    assert (
        platform.throttles() == []
    )  # not one refusal, although the turns want twice the calls a second
    assert platform.refused() == []


async def test_a_throttle_answer_rests_the_api_and_the_answer_still_lands(
    paced: Harness,
) -> None:
    platform = paced
    await platform.limit_fake()
    await platform.start(experts=[FAST_ECHO])
    if not platform.can(Capability.PACED):
        pytest.skip("nothing of an answer goes through a paced API here")
    rest = platform.throttle_next()
    answer = await platform.answer(await platform.send("throttled"), timeout=30)
    assert "You said:\n> throttled" in answer.text
    assert len(platform.throttles()) == 1
    gap = await eventually(platform.after_throttle)
    assert gap >= rest * 1000 - 50  # nobody called the API within the rest it named
