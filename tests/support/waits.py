"""Waiting in tests: poll a condition until it holds (``eventually``), never a fixed sleep."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any


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
