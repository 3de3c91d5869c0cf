"""The base config of the tests: one console integration, a fast echo expert, short leases, on
the running test's Redis target and key prefix; an OpenAI-compatible expert's entry."""

from __future__ import annotations

from typing import Any

from tests.fakes.experts import OPENAI_KEY
from tests.support.redis_targets import current


def base_config(prefix: str, **integration: Any) -> dict[str, Any]:
    """A config with one console integration and a fast echo expert."""
    console: dict[str, Any] = {
        "id": "console",
        "platform": "console",
        "xpertId": "echo",
        "summaryWindowSeconds": 0,
        "maxWindowSeconds": 5,
        "updateIntervalMs": 100,
    }
    console.update(integration)
    return {
        "redis": current().settings(prefix),
        "logging": {"level": "warning", "format": "json"},
        "runtime": {"leaseSeconds": 2, "pollIntervalMs": 50, "shutdownGraceSeconds": 2},
        "experts": [
            {"id": "echo", "kind": "echo", "stepDelayMs": 20, "charDelayMs": 2, "chunkChars": 4}
        ],
        "integrations": [console],
        # The archive (on by default) is off here: tests that are about it turn it on with a
        # database of their own (tests/archive), the rest leave no SQLite file behind.
        "archive": {"enabled": False},
    }


def openai_expert(url: str, **extra: Any) -> dict[str, Any]:
    return {
        "id": "gpt",
        "kind": "openai",
        "baseUrl": url,
        "apiKey": OPENAI_KEY,
        "model": "qwen2.5",
        "systemPrompt": "Reply in {{sys.language}} ({{sys.timezone}}).",
        **extra,
    }
