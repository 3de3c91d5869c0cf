"""The control channel: Stop and steer requests reach the replica that runs the turn.

A Stop or a steer can arrive on any replica; the one holding the conversation's lease acts. The
request is published on one Redis channel (pub/sub: at once); a missed Stop is still seen by the
lease renewal, which re-checks the cancel flag, and a missed steer leaves the message in the
burst, where it becomes the next turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any, Protocol

import structlog

from sessions import SessionStore

log = structlog.get_logger("gateway.control")


class Runs(Protocol):
    """What the control channel drives: the runs of this replica."""

    def stop_local(self, conversation: str, turn_id: str | None, reason: str = "stop") -> bool: ...

    def steer_local(self, conversation: str) -> bool: ...


class Control:
    def __init__(self, *, store: SessionStore) -> None:
        self.store = store

    async def cancel(self, conversation: str, turn_id: str) -> None:
        await self.store.publish_control(
            {"op": "cancel", "conversation": conversation, "turnId": turn_id}
        )

    async def steer(self, conversation: str) -> None:
        await self.store.publish_control({"op": "steer", "conversation": conversation})

    async def listen(self, runs: Runs, stopping: asyncio.Event) -> None:
        """Subscribe and dispatch until ``stopping``; a lost subscription is made again."""
        while not stopping.is_set():
            pubsub = self.store.redis.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(self.store.keys.control_channel())
                async for message in pubsub.listen():
                    if message.get("type") == "message":
                        self._dispatch(runs, message["data"])
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("control channel lost; resubscribing", error=str(exc))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stopping.wait(), 1)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]

    @staticmethod
    def _dispatch(runs: Runs, raw: Any) -> None:
        try:
            data = json.loads(raw)
            op, conversation = data.get("op"), str(data["conversation"])
        except (ValueError, KeyError, TypeError, AttributeError):
            log.warning("control message ignored")
            return
        if op == "cancel":
            runs.stop_local(conversation, data.get("turnId"))
        elif op == "steer":
            runs.steer_local(conversation)
