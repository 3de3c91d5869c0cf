"""What a Redis failure is, as the rest of the gateway sees it: the one error every store
raises (``StoreUnavailable``), and the exception tuples a caller catches, so that no module
outside ``sessions/`` needs to know redis-py's exceptions."""

from __future__ import annotations

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import OutOfMemoryError, ReadOnlyError, RedisError
from redis.exceptions import TimeoutError as RedisTimeoutError

__all__ = ["STORE_DOWN", "STORE_FAILED", "StoreUnavailable"]


class StoreUnavailable(RuntimeError):
    """Redis did not accept a write (unreachable, out of memory, read-only)."""


# Redis could not serve a request (unreachable, timed out, loading, read-only, out of memory):
# what the admin API answers with a 503. Any other error of the client is a bug, not an outage.
STORE_DOWN: tuple[type[Exception], ...] = (
    StoreUnavailable,
    RedisConnectionError,
    RedisTimeoutError,
    ReadOnlyError,
    OutOfMemoryError,
    OSError,
)

# Any failure of a call to Redis, the client's own errors included: what intake turns into one
# exception (``IngestUnavailable``) for the adapters.
STORE_FAILED: tuple[type[Exception], ...] = (StoreUnavailable, RedisError, OSError)
