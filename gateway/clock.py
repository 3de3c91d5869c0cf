"""The one wall clock of the core: milliseconds since the epoch, for leases, windows and audit
records. Components take it as an injectable ``clock`` so tests can move time."""

from __future__ import annotations

import time


def now_ms() -> int:
    return int(time.time() * 1000)
