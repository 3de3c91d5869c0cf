"""Session state: dedup, burst buffers with a due index, turns and leases, bindings, audit.

Every multi-key change is one Lua script (``sessions/lua``) whose keys share one hash slot (a
conversation's keys and its shard's due index, ``keys.py``), so each runs on a Redis Cluster as
on a single server; every key has a TTL or a comment in ``keys.py`` saying why not. (Over 300
lines: one class holding every call of the state machine, each a few lines.)
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any, Literal, cast

from redis.exceptions import RedisError

from sessions.autopipe import ScriptPipe
from sessions.connection import RedisClient
from sessions.due import peek_due
from sessions.errors import StoreUnavailable as StoreUnavailable
from sessions.keys import KeyBuilder
from sessions.layout import ensure_layout
from sessions.pubsub import PubSubHub
from sessions.results import Binding as Binding
from sessions.results import BurstWrite as BurstWrite
from sessions.results import Claim as Claim
from sessions.results import ClaimRequest as ClaimRequest
from sessions.results import IntakeResult as IntakeResult
from sessions.results import audit_fields as audit_fields
from sessions.scripts import lua

HOUR_MS = 3_600_000


class SessionStore:
    """The gateway's Redis state machine. One instance per process, shared by all tasks."""

    def __init__(
        self,
        *,
        client: RedisClient,
        keys: KeyBuilder,
        sharded_pubsub: bool = False,
        dedup_ttl_ms: int = 24 * HOUR_MS,
        turn_ttl_ms: int = 24 * HOUR_MS,
        snapshot_ttl_ms: int = 30 * 24 * HOUR_MS,
        audit_maxlen: int = 10_000,
        on_exchange: Callable[[float, int], None] | None = None,
    ) -> None:
        self.redis = client
        self.keys = keys
        self.dedup_ttl_ms = dedup_ttl_ms
        self.turn_ttl_ms = turn_ttl_ms
        self.snapshot_ttl_ms = snapshot_ttl_ms
        self.audit_maxlen = audit_maxlen
        self._intake = client.register_script(lua("intake.lua"))
        self._claim = client.register_script(lua("claim.lua"))
        self._renew = client.register_script(lua("renew.lua"))
        self._turnset = client.register_script(lua("turnset.lua"))
        self._finish = client.register_script(lua("finish.lua"))
        self._binding = client.register_script(lua("binding.lua"))
        self._binding_set = client.register_script(lua("binding_set.lua"))
        self._burst_take = client.register_script(lua("burst_take.lua"))
        self._due_peek = client.register_script(lua("due_peek.lua"))
        # Every script call goes through the auto-pipeline: intake (one per inbound event) and
        # the turn's claim, renewals, bindings and finish, batched across conversations.
        # ``on_exchange``: told of each exchange of the pipe (the gateway's latency histogram).
        self.pipe = ScriptPipe(client, name=f"{keys.prefix}-scripts", on_exchange=on_exchange)
        self.pubsub = PubSubHub(client, sharded=sharded_pubsub)

    async def close(self) -> None:
        """Give the auto-pipeline's connection back (before the client closes)."""
        await self.pipe.close()

    async def prepare(self) -> None:
        """Check the key layout, and load every script once at start-up (on every primary of a
        cluster), so each later call is a single EVALSHA."""
        await ensure_layout(self.redis, self.keys)
        for script in (
            self._intake,
            self._claim,
            self._renew,
            self._turnset,
            self._finish,
            self._binding,
            self._binding_set,
            self._burst_take,
            self._due_peek,
        ):
            script.sha = await self.redis.script_load(script.script)

    # --- intake ----------------------------------------------------------------------------
    async def intake(self, write: BurstWrite) -> IntakeResult:
        """Dedup and append in ONE round trip; returns once the envelope is durable in Redis
        (or refused past ``write.cap``: status ``full``)."""
        try:
            status, due, busy, told = await self.pipe.evalsha(
                self._intake, self.intake_keys(write), self.intake_args(write)
            )
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(str(exc)) from exc
        return IntakeResult(
            status=status, due_ms=int(due), busy=bool(int(busy)), told=str(told) == "1"
        )

    def intake_keys(self, write: BurstWrite) -> list[str]:
        """KEYS of intake.lua; the scripts that wrap it (group watch, budgets) append theirs."""
        return self.keys.intake(write.conversation, write.event_id)

    def intake_args(self, write: BurstWrite) -> list[Any]:
        """ARGV of intake.lua (the wrapping scripts append theirs)."""
        burst_ttl = max(self.dedup_ttl_ms, 3 * write.max_window_ms)
        return [
            write.envelope_json,
            write.now_ms,
            write.window_ms,
            write.max_window_ms,
            self.dedup_ttl_ms,
            burst_ttl,
            write.conversation,
            write.mode,
            write.cap.messages,
            write.cap.bytes,
        ]

    async def mark_seen(self, conversation: str, event_id: str, now_ms: int) -> bool:
        """Dedup alone (for clicks handled at once): True the first time, False for a repeat."""
        try:
            ok = await self.redis.set(
                self.keys.dedup(conversation, event_id), now_ms, nx=True, px=self.dedup_ttl_ms
            )
        except (RedisError, OSError) as exc:
            raise StoreUnavailable(str(exc)) from exc
        return bool(ok)

    # --- due index and claims --------------------------------------------------------------
    async def due_and_next(self, now_ms: int, limit: int = 64) -> tuple[list[str], int | None]:
        """Up to ``limit`` conversations due now (soonest first) in every shard, and when the
        next one is due."""
        due, soonest = await self.due_in(now_ms, limit=limit)
        times = [at for at in soonest.values() if at is not None]
        return due, min(times) if times else None

    async def due_in(
        self, now_ms: int, *, limit: int = 64, shards: Iterable[int] | None = None
    ) -> tuple[list[str], dict[int, int | None]]:
        """Up to ``limit`` conversations due now (soonest first) in ``shards`` (all: None), and
        per shard read when something is next due there, after those (None: nothing).

        One script call per shard - its soonest members (due_peek.lua) - through the
        auto-pipeline: one write on a single server, one per node (in parallel) on a cluster. A
        shard whose every member read is due may hold more: its next time is then now."""
        return await peek_due(self.pipe, self._due_peek, self.keys, now_ms, limit, shards)

    async def claim(
        self,
        *,
        conversation: str,
        owner: str,
        turn_id: str,
        now_ms: int,
        lease_ms: int,
        session_timeout_ms: int = 0,
    ) -> Claim | None:
        """Take the conversation's due turn. With ``session_timeout_ms``, a new turn of plain
        messages also continues the conversation's session when it has one not idle past that
        (``Claim.bound``: the binding, as ``open_or_continue`` answers it), in the same call."""
        request = ClaimRequest(owner, turn_id, now_ms, lease_ms, session_timeout_ms)
        return Claim.of_reply(conversation, owner, await self.claim_reply(conversation, request))

    async def claim_reply(self, conversation: str, request: ClaimRequest) -> list[Any]:
        """claim.lua's reply to ``request`` (``Claim.of_reply`` reads it)."""
        return cast(
            list[Any],
            await self.pipe.evalsha(
                self._claim, self.claim_keys(conversation), self.claim_args(conversation, request)
            ),
        )

    def claim_keys(self, conversation: str) -> list[str]:
        """KEYS of claim.lua."""
        k = self.keys
        return [
            k.due_of(conversation),
            k.lease(conversation),
            k.burst(conversation),
            k.burst_meta(conversation),
            k.turn(conversation),
            k.binding(conversation),
        ]

    def claim_args(self, conversation: str, request: ClaimRequest) -> list[Any]:
        """ARGV of claim.lua."""
        timeout = request.session_timeout_ms
        return [
            conversation,
            request.now_ms,
            request.owner,
            request.lease_ms,
            request.turn_id,
            self.turn_ttl_ms,
            timeout,
            timeout + 60_000,
            "1" if request.split_by_sender else "0",
        ]

    async def renew(
        self, *, conversation: str, owner: str, now_ms: int, lease_ms: int
    ) -> tuple[bool, str]:
        """Extend the lease; returns (still held, cancel request for this conversation or '')."""
        k = self.keys
        held, cancel = await self.pipe.evalsha(
            self._renew,
            keys=[k.lease(conversation), k.due_of(conversation), k.cancel(conversation)],
            args=[owner, lease_ms, conversation, now_ms],
        )
        return bool(int(held)), str(cancel)

    async def set_turn_fields(self, *, conversation: str, owner: str, **fields: str) -> bool:
        flat: list[str] = []
        for key, value in fields.items():
            flat += [key, value]
        ok = await self.pipe.evalsha(
            self._turnset,
            keys=[self.keys.lease(conversation), self.keys.turn(conversation)],
            args=[owner, *flat],
        )
        return bool(ok)

    async def finish(
        self,
        *,
        conversation: str,
        owner: str,
        now_ms: int,
        mode: Literal["finish", "handback"] = "finish",
        session_id: str = "",
        binding_ttl_ms: int = 0,
    ) -> tuple[str, int]:
        """Release the lease; ``finish`` also drops the turn and touches the session's binding."""
        k = self.keys
        res = await self.pipe.evalsha(
            self._finish,
            keys=[
                k.lease(conversation),
                k.due_of(conversation),
                k.turn(conversation),
                k.burst(conversation),
                k.burst_meta(conversation),
                k.cancel(conversation),
                k.binding(conversation),
            ],
            args=[owner, conversation, now_ms, mode, session_id, binding_ttl_ms],
        )
        return str(res[0]), int(res[1]) if len(res) > 1 else 0

    async def request_cancel(self, conversation: str, turn_id: str, ttl_ms: int) -> None:
        await self.redis.set(self.keys.cancel(conversation), turn_id, px=ttl_ms)

    async def turn(self, conversation: str) -> dict[str, str]:
        return cast(dict[str, str], await self.redis.hgetall(self.keys.turn(conversation)))

    async def burst_items(self, conversation: str) -> list[dict[str, Any]]:
        raw = cast(list[str], await self.redis.lrange(self.keys.burst(conversation), 0, -1))
        return [json.loads(r) for r in raw]

    async def burst_take(self, *, conversation: str, owner: str, count: int) -> bool:
        k = self.keys
        return bool(
            await self.pipe.evalsha(
                self._burst_take,
                keys=[k.lease(conversation), k.burst(conversation), k.burst_meta(conversation)],
                args=[owner, count],
            )
        )

    async def burst_length(self, conversation: str) -> int:
        return int(await self.redis.llen(self.keys.burst(conversation)))

    # --- bindings --------------------------------------------------------------------------
    async def open_or_continue(
        self,
        *,
        conversation: str,
        now_ms: int,
        timeout_ms: int,
        new_session_id: str,
        xpert_id: str,
        snapshot_hash: str,
        count_turn: bool = True,
        card: str = "",
    ) -> Binding:
        # The binding outlives its idle timeout by a minute so the check in the script decides.
        state, data = await self.pipe.evalsha(
            self._binding,
            keys=[self.keys.binding(conversation), self.keys.turn(conversation)],
            args=[
                now_ms,
                timeout_ms,
                new_session_id,
                xpert_id,
                snapshot_hash,
                timeout_ms + 60_000,
                "1" if count_turn else "0",
                card,
            ],
        )
        return Binding(state=state, fields=json.loads(data))

    async def binding(self, conversation: str) -> dict[str, str]:
        return cast(dict[str, str], await self.redis.hgetall(self.keys.binding(conversation)))

    async def set_binding_fields(self, conversation: str, session_id: str, **fields: str) -> bool:
        flat: list[str] = []
        for key, value in fields.items():
            flat += [key, value]
        return bool(
            await self.pipe.evalsha(
                self._binding_set, keys=[self.keys.binding(conversation)], args=[session_id, *flat]
            )
        )

    async def end_session(self, conversation: str) -> dict[str, str]:
        """End the conversation's session; the next message opens a new one. Returns the old one."""
        key = self.keys.binding(conversation)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hgetall(key)
            pipe.delete(key)
            old, _ = await pipe.execute()
        result: dict[str, str] = old
        return result

    # --- config snapshots (content-addressed, shared by sessions) ---------------------------
    async def put_snapshot(self, digest: str, snapshot_json: str) -> None:
        await self.redis.set(self.keys.snapshot(digest), snapshot_json, px=self.snapshot_ttl_ms)

    async def get_snapshot(self, digest: str) -> str | None:
        return cast(str | None, await self.redis.get(self.keys.snapshot(digest)))

    # --- audit -----------------------------------------------------------------------------
    async def audit(self, record: dict[str, Any]) -> None:
        """Append to the audit stream (bounded by MAXLEN rather than a TTL)."""
        await self.redis.xadd(
            self.keys.audit(), audit_fields(record), maxlen=self.audit_maxlen, approximate=True
        )

    # --- replicas --------------------------------------------------------------------------
    async def heartbeat(self, replica_id: str, info: dict[str, Any], ttl_ms: int) -> None:
        await self.redis.set(self.keys.replica(replica_id), json.dumps(info), px=ttl_ms)

    async def publish_control(self, conversation: str, message: dict[str, Any]) -> None:
        """A Stop or steer for ``conversation``, on its shard's control channel."""
        channel = self.keys.control_channel(conversation, self.pubsub.sharded)
        await self.pubsub.publish(channel, json.dumps(message))

    def control_channels(self) -> list[str]:
        return self.keys.control_channels(self.pubsub.sharded)
