"""Waiting in tests: poll a condition until it holds (``eventually``), or until the gateway is
idle to see that nothing more happens (``no_new_card``), never a fixed sleep."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tests.support.helpers import ConsoleClient


async def eventually(
    check: Callable[[], Any], timeout: float = 10.0, interval: float = 0.05
) -> Any:
    """Poll ``check`` (sync or async) until it returns a truthy value; fail after ``timeout``."""
    deadline = asyncio.get_running_loop().time() + timeout
    last: Any = None
    while True:
        last = check()
        if asyncio.iscoroutine(last):
            last = await last
        if last:
            return last
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"condition not met within {timeout} s (last value: {last!r})")
        await asyncio.sleep(interval)


async def no_new_card(console: ConsoleClient, count: int, chat: str = "team") -> None:
    """Nothing more arrives: once the in-process gateway behind ``console`` is idle (nothing
    ingesting, due, claimed or running), ``chat`` still has ``count`` cards."""
    await console.idle()
    assert len(await console.cards(chat)) == count
