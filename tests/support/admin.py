"""The admin API as the tests call it: the token of their configs and one signed request."""

from __future__ import annotations

from typing import Any

from tests.support.helpers import ConsoleClient

TOKEN = "admin-secret-token"


async def admin(
    console: ConsoleClient, method: str, path: str, token: str = TOKEN, **params: str
) -> tuple[int, dict[str, Any]]:
    headers = {"Authorization": f"Bearer {token}"}
    async with console.http.request(
        method, console.base + path, headers=headers, params=params
    ) as resp:
        return resp.status, await resp.json()
