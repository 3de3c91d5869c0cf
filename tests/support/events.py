"""External events as their sources send them: a signed generic event posted to
``/api/events/{integrationId}/generic``."""

from __future__ import annotations

import hashlib
import hmac
import json
from typing import Any

from tests.support.helpers import ConsoleClient

GENERIC_SECRET = "generic-secret-77"


def sign(secret: str, body: bytes) -> str:
    return hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


async def post(
    client: ConsoleClient, path: str, body: bytes, headers: dict[str, str]
) -> tuple[int, dict[str, Any]]:
    headers = {"Content-Type": "application/json", **headers}
    async with client.http.post(client.base + path, data=body, headers=headers) as resp:
        return resp.status, await resp.json(content_type=None)


async def generic(
    client: ConsoleClient,
    data: dict[str, Any],
    *,
    delivery: str | None = None,
    prefix: bool = True,
    integration: str = "console",
) -> tuple[int, dict[str, Any]]:
    body = json.dumps(data).encode()
    headers = {"X-Signature-256": ("sha256=" if prefix else "") + sign(GENERIC_SECRET, body)}
    if delivery:
        headers["X-Delivery-Id"] = delivery
    return await post(client, f"/api/events/{integration}/generic", body, headers)
