"""What reading an XpertAI thread's state costs after a turn (gateway/experts/xpert_input.py
``read_state``, xpert_clarify.py ``from_state``): the fake XpertAI serves a thread of N turns
(each a human message, an AI message with a tool call, its tool message and the answer, shaped
as the server sends them: tests/fakes/xpertai_agent.py ``lc_message``), and the gateway's read
is timed: the GET through HTTP (download and JSON parse) and the search for a question.

Prints ONE JSON line per thread size: turns, state bytes, the JSON parse alone (what it would
hold the event loop: ``read_state`` parses a state over 256 KB on a thread), the whole read
(median of 5; the fake serves it from the same process), and ``from_state``.

Usage: python bench/xpert_state.py [--turns 10 100 1000] [--answer-chars 1500]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from gateway.experts.xpert_clarify import from_state  # noqa: E402
from gateway.experts.xpert_input import read_state  # noqa: E402
from tests.fakes.xpertai import API_KEY, FakeXpertAI  # noqa: E402
from tests.fakes.xpertai_agent import Thread, lc_message  # noqa: E402
from tests.support.helpers import serve  # noqa: E402


def thread_values(turns: int, answer_chars: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    for i in range(turns):
        call = {"name": "search", "args": {"query": f"q{i}"}, "id": f"c{i}", "type": "tool_call"}
        messages += [
            lc_message("HumanMessage", content=f"question {i}", id=f"h{i}"),
            lc_message("AIMessage", content="", tool_calls=[call]),
            lc_message("ToolMessage", name="search", tool_call_id=f"c{i}", content="x" * 400),
            lc_message("AIMessage", content="y" * answer_chars),
        ]
    return {"messages": messages, "sys": {"language": "en"}}


async def measure(turns: int, answer_chars: int) -> dict[str, Any]:
    fake = FakeXpertAI()
    thread = Thread(id="t-bench", assistant="sales", checkpointed=True)
    thread.values = thread_values(turns, answer_chars)
    fake.threads[thread.id] = thread
    async for base in serve(fake.app()):
        url = f"{base}/api/ai/threads/{thread.id}/state"
        async with aiohttp.ClientSession(headers={"x-api-key": API_KEY}) as http:
            async with http.get(url) as resp:
                raw = await resp.read()
            started = time.perf_counter()
            json.loads(raw)
            parse = (time.perf_counter() - started) * 1000
            reads = []
            for _ in range(5):
                started = time.perf_counter()
                values = await read_state(http, url, {})
                reads.append((time.perf_counter() - started) * 1000)
            started = time.perf_counter()
            from_state(values)
            search = (time.perf_counter() - started) * 1000
    return {
        "turns": turns,
        "state_bytes": len(raw),
        "parse_ms": round(parse, 2),  # what a parse on the event loop would hold it
        "read_ms_median": round(statistics.median(reads), 2),
        "from_state_ms": round(search, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--turns", type=int, nargs="+", default=[10, 100, 1000])
    parser.add_argument("--answer-chars", type=int, default=1500)
    args = parser.parse_args()
    for turns in args.turns:
        print(json.dumps(asyncio.run(measure(turns, args.answer_chars))))


if __name__ == "__main__":
    main()
