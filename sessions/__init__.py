"""All gateway state in Redis: connection, key builder, dedup, bursts, bindings, leases, records.

This package imports nothing else of ours: it stores envelopes and records as JSON it does not
interpret (docs/architecture.md).
"""

from sessions.connection import RedisClient, RedisHandle, connect_redis
from sessions.durability import confirm_durable
from sessions.errors import STORE_DOWN, STORE_FAILED, StoreUnavailable
from sessions.external import EventCardStore
from sessions.history import HistoryStore
from sessions.keys import KeyBuilder
from sessions.layout import LayoutMismatch
from sessions.outbox import Outbox, OutboxEntry
from sessions.platform_budget import Line, MonthUsage, PlatformBudgets, Take, Window
from sessions.principals import PrincipalStore
from sessions.pubsub import PubSubHub
from sessions.records import RecordStore
from sessions.records_admin import SessionRecords
from sessions.results import BufferCap, BurstWrite
from sessions.schedules import ScheduleStore
from sessions.store import (
    Binding,
    Claim,
    ClaimRequest,
    IntakeResult,
    SessionStore,
)
from sessions.timeline import TimelineStore

__all__ = [
    "STORE_DOWN",
    "STORE_FAILED",
    "Binding",
    "BufferCap",
    "BurstWrite",
    "Claim",
    "ClaimRequest",
    "EventCardStore",
    "HistoryStore",
    "IntakeResult",
    "KeyBuilder",
    "LayoutMismatch",
    "Line",
    "MonthUsage",
    "Outbox",
    "OutboxEntry",
    "PlatformBudgets",
    "PrincipalStore",
    "PubSubHub",
    "RecordStore",
    "RedisClient",
    "RedisHandle",
    "ScheduleStore",
    "SessionRecords",
    "SessionStore",
    "StoreUnavailable",
    "Take",
    "TimelineStore",
    "Window",
    "confirm_durable",
    "connect_redis",
]
