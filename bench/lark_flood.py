"""A flood into one busy conversation through the signed Lark webhook (issue 25, item 6).

A turn comes to wait on a Confirm in chat ``oc_flood``, the next message there starts a turn that
runs a while (echo steps of ``--step-delay-ms``), and ``--messages`` signed messages of
``--size`` bytes go to that chat from ``--concurrency`` senders at once. Meanwhile a prober
posts a message to another chat every ``--probe-ms`` and times its webhook answer. Prints ONE
JSON line:

  messages, size, flood_webhook_ms {p50,p90,p99,max}, non_200, flood_s, burst_items,
  burst_bytes (what Redis holds for the chat once the flood is in), notices (the bot's texts in
  the flooded chat), other_webhook_ms {p50,p99,max} (the prober), other_first_card_ms (a
  message to another chat after the flood: webhook to its reply card), uncapped_burst
  {intake_ms_first10, intake_ms_last10, claim_ms, claimed_items} (the store alone: a burst of
  ``--messages`` with no cap, then one claim of it: what the claim script costs)

The daemon runs in this process (tests.support.helpers.InProcessGateway) against the fake Lark
OpenAPI (tests/fakes/lark.py) and the Redis at ``--redis-url`` under a fresh key prefix (deleted
on the way out), so the figures include the senders' own signing and encryption on the same core:
compare runs of this script, not with Lark's 3 s. ``--no-cap-keys`` leaves out
``maxBufferedMessages`` (for a build that does not know it: then each integration's defaults).

Usage: python bench/lark_flood.py [--messages 300] [--size 20000] [--concurrency 16]
       [--step-delay-ms 4000] [--max-buffered-messages 100] [--no-cap-keys]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sessions.keys import KeyBuilder
from tests.fakes.lark import FakeLark
from tests.support.helpers import InProcessGateway
from tests.support.lark import (
    INTEGRATION,
    LarkHarness,
    final_card,
    lark_integration,
    message_event,
    reply_to,
)
from tests.support.waits import eventually


def quantiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)

    return {"p50": at(0.5), "p90": at(0.9), "p99": at(0.99), "max": round(ordered[-1], 1)}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    prefix = f"bench-flood-{uuid.uuid4().hex[:8]}"
    fake = FakeLark()
    await fake.start()
    integ = lark_integration(fake)
    if not args.no_cap_keys:
        integ["maxBufferedMessages"] = args.max_buffered_messages
    config = {
        "redis": {"url": args.redis_url, "keyPrefix": prefix},
        "logging": {"level": "error", "format": "json"},
        "runtime": {"leaseSeconds": 5, "pollIntervalMs": 50, "shutdownGraceSeconds": 1},
        "experts": [
            {
                "id": "echo",
                "kind": "echo",
                "stepDelayMs": args.step_delay_ms,
                "charDelayMs": 0,
                "chunkChars": 10_000,
            }
        ],
        "integrations": [integ],
    }
    gw = InProcessGateway(config)
    await gw.start()
    lark = LarkHarness(fake, gw)
    redis = aioredis.from_url(args.redis_url, decode_responses=True)
    burst = KeyBuilder(prefix=prefix).burst(f"{INTEGRATION}|p2p:oc_flood")
    try:
        await lark.post(message_event("[confirm] deploy", chat_id="oc_flood", message_id="om_c"))
        confirm = final_card(fake, "om_c", "Please confirm: shall I go ahead?")
        await eventually(confirm, timeout=10 * args.step_delay_ms / 1000)
        await lark.post(message_event("go on", chat_id="oc_flood", message_id="om_go"))
        await eventually(lambda: reply_to(fake, "om_go"), timeout=30)

        body = "x" * args.size
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        for i in range(args.messages):
            queue.put_nowait(
                message_event(f"{i} {body}", chat_id="oc_flood", message_id=f"om_f{i}")
            )
        flood_ms: list[float] = []
        statuses: list[int] = []
        other_ms: list[float] = []
        done = asyncio.Event()

        async def sender() -> None:
            while not queue.empty():
                payload = queue.get_nowait()
                began = time.perf_counter()
                status, _ = await lark.post(payload)
                flood_ms.append((time.perf_counter() - began) * 1000)
                statuses.append(status)

        async def prober() -> None:
            n = 0
            while not done.is_set():
                n += 1
                payload = message_event("probe", chat_id=f"oc_probe{n}", message_id=f"om_p{n}")
                began = time.perf_counter()
                await lark.post(payload)
                other_ms.append((time.perf_counter() - began) * 1000)
                await asyncio.sleep(args.probe_ms / 1000)

        probe = asyncio.create_task(prober())
        began = time.perf_counter()
        await asyncio.gather(*(sender() for _ in range(args.concurrency)))
        flood_s = time.perf_counter() - began
        done.set()
        await probe
        items = await redis.lrange(burst, 0, -1)  # type: ignore[misc]
        began = time.perf_counter()
        await lark.post(message_event("hello", chat_id="oc_other", message_id="om_other"))
        await eventually(lambda: reply_to(fake, "om_other"), timeout=60)
        other_first_card_ms = (time.perf_counter() - began) * 1000
        notices = sum(
            1
            for m in fake.messages.values()
            if m["from_bot"] and m["chat_id"] == "oc_flood" and m["msg_type"] == "text"
        )
        return {
            "messages": args.messages,
            "size": args.size,
            "concurrency": args.concurrency,
            "flood_webhook_ms": quantiles(flood_ms),
            "non_200": sum(1 for s in statuses if s != 200),
            "flood_s": round(flood_s, 2),
            "burst_items": len(items),
            "burst_bytes": sum(len(i) for i in items),
            "notices": notices,
            "other_webhook_ms": quantiles(other_ms),
            "other_probes": len(other_ms),
            "other_first_card_ms": round(other_first_card_ms, 1),
            "flood_webhook_ms_mean": round(statistics.fmean(flood_ms), 1) if flood_ms else None,
        }
    finally:
        await lark.close()
        await fake.stop()
        async for key in redis.scan_iter(match=f"{prefix}*", count=1000):
            await redis.delete(key)
        await redis.aclose()


async def claim_figures(args: argparse.Namespace) -> dict[str, Any]:
    """One conversation's burst of ``--messages`` stored envelopes of ``--size`` (no cap), then
    its claim: the intake's time at the start and the end of the burst, and the claim's."""
    from gateway.envelope import Chat, Envelope, Sender
    from sessions import BurstWrite, SessionStore

    prefix = f"bench-claim-{uuid.uuid4().hex[:8]}"
    client = aioredis.from_url(args.redis_url, decode_responses=True)
    store = SessionStore(client=client, keys=KeyBuilder(prefix=prefix))
    await store.prepare()
    conv = f"{INTEGRATION}|p2p:oc_claim"
    intake_ms: list[float] = []
    try:
        for i in range(args.messages):
            env = Envelope(
                integration_id=INTEGRATION,
                platform="lark",
                event_id=f"om_{i}",
                chat=Chat(id="oc_claim", type="p2p"),
                sender=Sender(id="ou_a"),
                text=f"{i} " + "x" * args.size,
            )
            began = time.perf_counter()
            await store.intake(
                BurstWrite(
                    conversation=conv,
                    event_id=env.event_id,
                    envelope_json=env.to_json(),
                    now_ms=0,
                    window_ms=0,
                    max_window_ms=5000,
                )
            )
            intake_ms.append((time.perf_counter() - began) * 1000)
        began = time.perf_counter()
        claim = await store.claim(
            conversation=conv, owner="bench", turn_id="t1", now_ms=1, lease_ms=10_000
        )
        claim_ms = (time.perf_counter() - began) * 1000
        first = statistics.fmean(intake_ms[:10])
        last = statistics.fmean(intake_ms[-10:])
        return {
            "intake_ms_first10": round(first, 2),
            "intake_ms_last10": round(last, 2),
            "claim_ms": round(claim_ms, 1),
            "claimed_items": len(claim.items) if claim else 0,
        }
    finally:
        await store.close()
        async for key in client.scan_iter(match=f"{prefix}*", count=1000):
            await client.delete(key)
        await client.aclose()


async def both(args: argparse.Namespace) -> dict[str, Any]:
    figures = await run(args)
    figures["uncapped_burst"] = await claim_figures(args)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=300)
    parser.add_argument("--size", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--step-delay-ms", type=int, default=4000)
    parser.add_argument("--probe-ms", type=int, default=100)
    parser.add_argument("--max-buffered-messages", type=int, default=100)
    parser.add_argument("--no-cap-keys", action="store_true")
    parser.add_argument("--redis-url", default="redis://127.0.0.1:6379/0")
    print(json.dumps(asyncio.run(both(parser.parse_args()))))


if __name__ == "__main__":
    main()
