"""The configuration's errors: one ``path: reason`` line per problem (``check`` prints them)."""

from __future__ import annotations

from collections.abc import Sequence

from gateway.errors import GatewayError


class ConfigError(GatewayError, ValueError):
    """A configuration problem, one ``path: reason`` line per problem."""

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        super().__init__("\n".join(self.problems))


class ConfigFileError(ConfigError):
    """The file itself could not be used: missing, unreadable, empty or not YAML."""
