"""The one key builder: every Redis key and channel the gateway uses is spelled here.

Redis Cluster runs a script only when every key it touches hashes to one slot, and the session
scripts (intake, claim, renew, finish) touch a conversation's keys *and* the due index that tells
the flushers what to look at. So conversations are spread over ``shards`` due shards - a
conversation's shard is fixed by its id (CRC-32 of it, modulo the count) - and every key of a
conversation carries its shard's hash tag, the same tag as that shard's due index: each script
addresses one slot, on a cluster as on a single server.

Shard ``k`` of ``n`` has a tag chosen to hash into the k-th n-th of the slot space
(:func:`shard_tag`), so the shards spread evenly over primaries that own equal contiguous slot
ranges, as ``redis-cli --cluster create`` assigns them. The number of shards is fixed for a key
prefix (``runtime.dueShards``; ``sessions.layout`` refuses a replica that disagrees): changing it
would move every conversation's keys.

A chat's transcript and its context (memory, session variables, recent group messages) carry
the chat's shard tag the same way, by ``<integration>|<chat>``. Other keys outside a
conversation are single-key records (one slot each, never mixed with another key in a script or
transaction), or noted below where one key is shared by everyone.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from redis.crc import key_slot

from sessions.audit_keys import AuditKeys
from sessions.key_ids import arg as _arg
from sessions.key_ids import id_part
from sessions.key_shards import MAX_SHARDS, shard_of, shard_tag

_CONVS_KEPT = 4096


@dataclass(frozen=True, slots=True)
class _Conv:
    """What every key of one conversation starts from, worked out once (issue 15)."""

    shard: int
    tag: str  # "{<shard tag>}"
    base: str  # "<prefix>:{<shard tag>}:<conversation>:"
    due: str  # the shard's due index


@dataclass(frozen=True, slots=True)
class KeyBuilder(AuditKeys):
    """Builds keys as ``<prefix>:<part>:…``; a conversation's keys as
    ``<prefix>:{<shard tag>}:<conversation>:<part>``."""

    prefix: str = "xgw"
    sep: str = ":"
    shards: int = 16  # runtime.dueShards
    # conversation -> its shard, tag, key base and due index (a message builds about ten of its
    # keys: the CRC and the joins once per conversation, not per key; issue 15). Bounded:
    # cleared when full, so a flood of distinct conversations costs the rebuilds, never memory.
    _convs: dict[str, _Conv] = field(default_factory=dict, compare=False, repr=False)

    def __post_init__(self) -> None:
        if not 1 <= self.shards <= MAX_SHARDS:
            raise ValueError(f"shards must be 1..{MAX_SHARDS}, not {self.shards}")

    def _k(self, *parts: str) -> str:
        return self.sep.join((self.prefix, *parts))

    # --- shards ------------------------------------------------------------------------------
    def shard(self, conv: str) -> int:
        return self._of(conv).shard

    def _of(self, conv: str) -> _Conv:
        known = self._convs.get(conv)
        if known is None:
            if len(self._convs) >= _CONVS_KEPT:
                self._convs.clear()
            shard = shard_of(conv, self.shards)
            tag = self._tag(shard)
            base = self._k(tag, conv, "")
            known = self._convs[conv] = _Conv(shard, tag, base, self._due(tag))
        return known

    def _tag(self, shard: int) -> str:
        return "{" + shard_tag(shard, self.shards) + "}"

    def slot(self, conv: str) -> int:
        """The cluster slot all of a conversation's keys are in."""
        return key_slot(shard_tag(self.shard(conv), self.shards).encode())

    # --- conversation-scoped (the shard's hash tag) -------------------------------------------
    def _conv(self, conv: str, part: str) -> str:
        return self._of(conv).base + part

    def intake(self, conv: str, event_id: str) -> list[str]:
        """The KEYS of intake.lua, in its order (``dedup``, ``burst``, ``burst_meta``,
        ``due_of``, ``turn``), from one look-up: every message builds them (issue 15)."""
        known = self._of(conv)
        base = known.base
        return [
            base + "dedup" + self.sep + _arg(event_id),
            base + "burst",
            base + "burstmeta",
            known.due,
            base + "turn",
        ]

    def dedup(self, conv: str, event_id: str) -> str:
        return self._conv(conv, "dedup") + self.sep + _arg(event_id)

    def burst(self, conv: str) -> str:
        return self._conv(conv, "burst")

    def burst_meta(self, conv: str) -> str:
        return self._conv(conv, "burstmeta")

    def turn(self, conv: str) -> str:
        return self._conv(conv, "turn")

    def lease(self, conv: str) -> str:
        return self._conv(conv, "lease")

    def binding(self, conv: str) -> str:
        return self._conv(conv, "binding")

    def cancel(self, conv: str) -> str:
        return self._conv(conv, "cancel")

    # --- external events (gateway/triggers/external.py, sessions/external.py) ----------------
    def event_card(self, conv: str) -> str:
        """The card of an external object (the conversation's subject) while it is open."""
        return self._conv(conv, "evcard")

    # --- group watch (gateway/triggers/watch*.py, sessions/watch.py) -------------------------
    def watch_cooldown(self, conv: str, watch_id: str) -> str:
        """A watch's cooldown in a chat. ``conv`` is the watch's conversation, which one
        (integration, chat, watch) always gives, so this is one key per (integration, watch,
        chat), in the conversation's slot: the script that checks it also dedups and appends."""
        return self._conv(conv, "watch") + self.sep + _arg(watch_id)

    def watches(self, integration_id: str) -> str:
        """An integration's runtime watches and enabled overrides: one hash, no TTL (it is
        configuration, changed only through the admin API). Safe on a cluster: every command on
        it names this key alone (HGETALL, HSET, HDEL, a MULTI on it only)."""
        return self._k("watches", id_part(integration_id))

    # --- budgets (gateway/policy/budgets.py, sessions/budgets.py)
    # ----------------------------------- A conversation's counters carry its hash tag:
    # budget_intake.lua checks them, dedups and appends in one step on one slot. Each has a TTL:
    # the turn windows an hour (PEXPIRE on each write), the day counters an hour after their day,
    # the usage index two days; all relative to the gateway's clock (PEXPIRE), which decides the
    # windows.
    def budget_turns(self, conv: str) -> str:
        """The turns the conversation started in the last hour: event id -> start ms."""
        return self._conv(conv, "bturns")

    def budget_sender_turns(self, conv: str, sender_id: str) -> str:
        """The turns one sender started in the conversation in the last hour."""
        return self._conv(conv, "bsender") + self.sep + _arg(sender_id)

    def budget_tokens(self, conv: str, day: str) -> str:
        """Tokens the conversation's turns reported on ``day`` (YYYY-MM-DD, local)."""
        return self._conv(conv, "btokens") + self.sep + _arg(day)

    def budget_refused(self, conv: str, day: str) -> str:
        """Messages refused over a budget on ``day``."""
        return self._conv(conv, "brefused") + self.sep + _arg(day)

    def budget_intake(self, conv: str, sender_id: str, day: str, integration_id: str) -> list[str]:
        """The keys budget_intake.lua adds to intake.lua's, in its order (``budget_turns``,
        ``budget_sender_turns``, ``budget_tokens``, ``budget_refused``, ``usage_of``), from one
        look-up: every message builds them (issue 15)."""
        known, sep = self._of(conv), self.sep
        base = known.base
        return [
            base + "bturns",
            base + "bsender" + sep + _arg(sender_id),
            base + "btokens" + sep + _arg(day),
            base + "brefused" + sep + _arg(day),
            self._usage(known.tag, integration_id),
        ]

    def usage(self, shard: int, integration_id: str) -> str:
        """An integration's conversations of ``shard`` with usage, scored by their last use
        (``GET /v1.0/usage`` reads every shard's)."""
        return self._usage(self._tag(shard), integration_id)

    def usage_of(self, conv: str, integration_id: str) -> str:
        return self._usage(self._of(conv).tag, integration_id)

    def _usage(self, tag: str, integration_id: str) -> str:
        return self._k(tag, "usage", id_part(integration_id))

    # --- schedules (gateway/triggers/schedules.py, sessions/schedules.py) ----------------------
    # Every command on these names one key alone (no script or transaction mixes two), so each
    # is safe on a cluster; the two hashes are shared by all replicas, read once per tick each.
    def schedules(self) -> str:
        """The runtime schedules (id -> JSON): no TTL, they live until deleted."""
        return self._k("schedules")

    def principals(self) -> str:
        """Runtime sender -> XpertAI user entries (id -> JSON), shared by every replica: no TTL."""
        return self._k("principals")

    def schedule_fires(self) -> str:
        """The last fire per schedule (id -> epoch ms): no TTL, it is what survives a restart;
        a deleted schedule's field goes with it."""
        return self._k("schedule-fires")

    def schedule_claim(self, schedule_id: str, fire_ms: int) -> str:
        """One fire's claim (SET NX PX): whoever sets it starts that fire's turn."""
        return self._k("schedule-claim", id_part(schedule_id), str(fire_ms))

    def routine(self, token: str) -> str:
        """A routine waiting for Confirm / Cancel (with a TTL)."""
        return self._k("routine", id_part(token))

    # --- due index: one sorted set per shard -------------------------------------------------
    def due(self, shard: int) -> str:
        """Conversations of ``shard`` with pending work, scored by when to look at them next.

        No TTL: it is an index whose members are removed when their work is done. The flushers
        read every shard (``SessionStore.due_in``: one due_peek.lua call per shard, through the
        auto-pipeline)."""
        return self._due(self._tag(shard))

    def _due(self, tag: str) -> str:
        return self._k(tag, "due")

    def due_of(self, conv: str) -> str:
        return self._of(conv).due

    def due_keys(self) -> list[str]:
        return [self.due(shard) for shard in range(self.shards)]

    # --- pub/sub channels --------------------------------------------------------------------
    # Sharded pub/sub (Redis >= 7, SPUBLISH/SSUBSCRIBE) delivers a channel's messages within its
    # slot's shard only, so every shard has its own channel and a listener subscribes to all of
    # them; classic pub/sub is broadcast to every node of a cluster anyway: one channel.
    def control_channels(self, sharded: bool) -> list[str]:
        """Stop and steer requests (gateway.turns.control)."""
        if not sharded:
            return [self._k("ctl")]
        return [self._k(self._tag(shard), "ctl") for shard in range(self.shards)]

    def control_channel(self, conv: str, sharded: bool) -> str:
        return self._k(self._tag(self.shard(conv)), "ctl") if sharded else self._k("ctl")

    # --- global, one key each ----------------------------------------------------------------
    def layout(self) -> str:
        """The key layout in use under this prefix (``sessions.layout``): read once at start."""
        return self._k("layout")

    def session_record(self, session_id: str) -> str:
        return self._k("session", id_part(session_id))

    def chat_sessions(self, integration_id: str, chat_id: str) -> str:
        return self._k("chat-sessions", self._chat(integration_id, chat_id))

    def history(self, session_id: str) -> str:
        return self._k("history", id_part(session_id))

    def snapshot(self, digest: str) -> str:
        return self._k("snapshot", id_part(digest))

    def audit(self) -> str:
        """The global event stream: session ends, watch fires (one key for everyone, bounded by
        MAXLEN rather than a TTL), and the turn rows older versions wrote here.

        Safe on a cluster: it is only ever written by a single-key XADD (never in a script or
        transaction with another key). A turn's row goes to its integration's stream
        (:meth:`audit_events`) instead, in the script that stores its record; a reader
        (``GET /v1.0/audit/events``) merges this stream with those.
        """
        return self._k("audit")

    # --- platform budgets (sessions/platform_budget.py): one hash tag per app ----------------
    # An app's (``lark:cli_x``) call logs, pauses and month ledgers carry the app as hash tag, so
    # one script checks and records its calls on one slot. TTLs: a log just over its window, a
    # pause its length, a line a minute, a ledger 40 days (each set by the script that writes it).
    def _pb(self, app: str, *parts: str) -> str:
        return self._k("pb", "{" + id_part(app) + "}", *parts)

    def platform_window(self, app: str, bucket: str, window_ms: int) -> str:
        """A bucket's calls of its last ``window_ms`` (zset: call -> Redis time in µs)."""
        return self._pb(app, "w", id_part(bucket), str(window_ms))

    def platform_pause(self, app: str, bucket: str | None = None) -> str:
        """A pause of the whole app (``bucket`` None) or of one bucket: its TTL is what is left."""
        return self._pb(app, *(("pause",) if bucket is None else ("bpause", id_part(bucket))))

    def platform_line(self, app: str, bucket: str) -> str:
        """The replicas waiting for a bucket's room (hash: replica -> its oldest call's rank and
        until when it counts), so the oldest call goes first whichever replica holds it."""
        return self._pb(app, "line", id_part(bucket))

    def platform_month(self, app: str, month: str) -> str:
        """The app's calls in ``month`` (the caller's label, ``2026-12``)."""
        return self._pb(app, "month", id_part(month))

    def record(self, namespace: str, key: str) -> str:
        """An adapter's own record (``sessions.records``); every write there carries a TTL."""
        return self._k("rec", namespace, key)

    def replica(self, replica_id: str) -> str:
        """A replica's heartbeat: one key per replica, written alone every 5 s."""
        return self._k("replica", id_part(replica_id))

    def spool_sync(self) -> str:
        """The marker a replica writes before ``WAITAOF`` once its spool went into intake
        (``sessions.durability``); it expires in a minute."""
        return self._k("spoolsync")

    # --- timeline (the console adapter's chat transcripts) -----------------------------------
    # A chat's transcript lives in its shard (by integration and chat id), with that shard's
    # channel, so the script that writes a record can publish the change in the same slot.
    def _chat(self, integration_id: str, chat_id: str) -> str:
        return f"{id_part(integration_id)}|{id_part(chat_id)}"

    def _chat_key(self, integration_id: str, chat_id: str, *parts: str) -> str:
        """``<prefix>:{<the chat's shard tag>}:<parts>``: a key on the chat's slot."""
        chat = self._chat(integration_id, chat_id)
        return self._k(self._tag(shard_of(chat, self.shards)), *parts)

    def timeline_messages(self, integration_id: str, chat_id: str) -> str:
        return self._chat_key(
            integration_id, chat_id, "tl", self._chat(integration_id, chat_id), "msgs"
        )

    def timeline_order(self, integration_id: str, chat_id: str) -> str:
        return self._chat_key(
            integration_id, chat_id, "tl", self._chat(integration_id, chat_id), "order"
        )

    # --- a chat's context (sessions/records_admin.py): the chat's slot, as its timeline -----
    # What a turn reads of its chat - the memory, the session's variables, recent group messages
    # - carries the chat's hash tag, so one script reads it all (context_read.lua). Each key is
    # still written alone (vars_apply.lua, forget.lua, a MULTI on the one key). Layout 3
    # (sessions/layout.py moves the keys of layout 2: ``<prefix>:memory:<integ|chat>``,
    # ``<prefix>:session:<id>:vars``, ``<prefix>:group-history:<integ|chat>``).
    def memory(self, integration_id: str, chat_id: str) -> str:
        """The chat's memory (/remember): outlives its sessions."""
        chat = self._chat(integration_id, chat_id)
        return self._chat_key(integration_id, chat_id, "memory", chat)

    def memory_pattern(self, integration_id: str) -> str:
        """A SCAN pattern matching the memory of every chat of an integration (erasure)."""
        chat = _glob(f"{id_part(integration_id)}|")
        return self.sep.join((_glob(self.prefix), "{*}", "memory", chat + "*"))

    def session_variables(self, integration_id: str, chat_id: str, session_id: str) -> str:
        """The variables of a session of the chat (the session record names its chat)."""
        return self._chat_key(integration_id, chat_id, "vars", id_part(session_id))

    def group_history(self, integration_id: str, chat_id: str) -> str:
        """Recent group messages the bot was not asked about."""
        chat = self._chat(integration_id, chat_id)
        return self._chat_key(integration_id, chat_id, "group-history", chat)

    def timeline_channels(self, sharded: bool) -> list[str]:
        if not sharded:
            return [self._k("timeline")]
        return [self._k(self._tag(shard), "timeline") for shard in range(self.shards)]

    def timeline_channel(self, integration_id: str, chat_id: str, sharded: bool) -> str:
        if not sharded:
            return self._k("timeline")
        return self._k(
            self._tag(shard_of(self._chat(integration_id, chat_id), self.shards)), "timeline"
        )


def _glob(text: str) -> str:
    """``text`` taken literally in a SCAN MATCH pattern."""
    return "".join("\\" + c if c in "*?[]\\" else c for c in text)
