"""The replica's current settings: one holder that every part reads, replaced as a whole when the
config is reloaded (SIGHUP), so no part can keep a stale copy of its own."""

from __future__ import annotations

import structlog

from gateway.config.settings import Settings

log = structlog.get_logger("gateway.config.settings")

# Sections a running replica cannot change (listening socket, Redis connection, spool, lease and
# worker sizing); a reload keeps the running values and says so.
RESTART_ONLY = ("server", "redis", "data_dir", "runtime")


class LiveSettings:
    """Call it for the current :class:`Settings`; pass it (a ``Callable[[], Settings]``) to
    whatever must see a reload, and read it at the moment of use rather than keeping the result."""

    def __init__(self, settings: Settings) -> None:
        self._current = settings

    def __call__(self) -> Settings:
        return self._current

    def replace(self, settings: Settings) -> Settings:
        """Make ``settings`` current, except the restart-only sections, which keep their running
        values; returns what is now current."""
        old = self._current
        if any(getattr(settings, f) != getattr(old, f) for f in RESTART_ONLY):
            log.warning("server, redis, dataDir and runtime changes apply after a restart")
            settings = settings.model_copy(update={f: getattr(old, f) for f in RESTART_ONLY})
        self._current = settings
        return settings
