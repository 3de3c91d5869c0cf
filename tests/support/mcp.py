"""MCP test support: the official MCP client (``mcp``'s streamable HTTP client) against an
in-process gateway, the ``mcp`` section of a config, and the audit rows the calls left."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

TOKEN = "mcp-token-0123456789abcdef"
OTHER = "mcp-token-other-client-000"
ADMIN = "admin-token-0123456789abcdef"


def with_mcp(config: dict[str, Any], **mcp: Any) -> dict[str, Any]:
    """``config`` with an admin token and two MCP clients: ``xpert-prod`` (token ``TOKEN``) for
    the expert ``echo``, ``other-team`` (``OTHER``) for an expert ``other`` added here."""
    config["experts"].append({"id": "other", "kind": "echo", "stepDelayMs": 1, "charDelayMs": 0})
    config["admin"] = {"token": ADMIN}
    config["mcp"] = {
        "clients": [
            {"id": "xpert-prod", "token": TOKEN, "experts": ["echo"]},
            {"id": "other-team", "token": OTHER, "experts": ["other"]},
        ],
        **mcp,
    }
    return config


@asynccontextmanager
async def mcp_client(port: int, token: str = TOKEN) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        url = f"http://127.0.0.1:{port}/mcp"
        async with Client(streamable_http_client(url, http_client=http)) as client:
            yield client


def answer(result: Any) -> dict[str, Any]:
    """A tool's structured answer; fails with its text when the call was an error."""
    assert not result.is_error, result.content[0].text
    return dict(json.loads(result.content[0].text))


async def audit_rows(port: int) -> list[dict[str, Any]]:
    """The ``mcp.call`` rows of the audit trail (admin API), numbers as numbers."""
    url = f"http://127.0.0.1:{port}/v1.0/audit/events?event=mcp.call&limit=100"
    async with aiohttp.ClientSession() as http:
        async with http.get(url, headers={"Authorization": f"Bearer {ADMIN}"}) as resp:
            assert resp.status == 200
            body = await resp.json()
    numbers = ("bytes", "at", "ms")
    return [{k: json.loads(v) if k in numbers else v for k, v in r.items()} for r in body["result"]]


async def scrape(port: int) -> str:
    async with aiohttp.ClientSession() as http:
        async with http.get(f"http://127.0.0.1:{port}/metrics") as resp:
            return await resp.text()
