"""The control channel: Stop and steer requests reach the replica that runs the turn.

A Stop or a steer can arrive on any replica; the one holding the conversation's lease acts. The
request is published at once on the conversation's control channel (``sessions.pubsub``: its due
shard's sharded channel where Redis has sharded pub/sub, so on a cluster it stays in the shard;
one classic channel otherwise), and every replica listens to all of them. A missed Stop is still
seen by the lease renewal, which re-checks the cancel flag, and a missed steer leaves the message
in the burst, where it becomes the next turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any, Protocol

import structlog

from sessions import SessionStore

log = structlog.get_logger("gateway.turns.control")


class Runs(Protocol):
    """What the control channel drives: the runs of this replica."""

    def stop_local(self, conversation: str, turn_id: str | None, reason: str = "stop") -> bool: ...

    def steer_local(self, conversation: str) -> bool: ...


class Control:
    def __init__(self, *, store: SessionStore) -> None:
        self.store = store

    async def cancel(self, conversation: str, turn_id: str) -> None:
        await self.store.publish_control(
            conversation, {"op": "cancel", "conversation": conversation, "turnId": turn_id}
        )

    async def steer(self, conversation: str) -> None:
        await self.store.publish_control(
            conversation, {"op": "steer", "conversation": conversation}
        )

    async def listen(self, runs: Runs, stopping: asyncio.Event) -> None:
        """Subscribe and dispatch until ``stopping``; a lost subscription is made again."""
        channels = self.store.control_channels()
        while not stopping.is_set():
            try:
                async for data in self.store.pubsub.listen(channels):
                    self._dispatch(runs, data)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("control channel lost; resubscribing", error=str(exc))
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(1):
                        await stopping.wait()

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
