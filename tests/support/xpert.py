"""The config of a gateway whose expert is an XpertAI agent (the fake of tests/fakes/xpertai.py)."""

from __future__ import annotations

from typing import Any

from tests.fakes.xpertai import API_KEY
from tests.support.admin import TOKEN
from tests.support.configs import base_config


def config(
    prefix: str, url: str, expert: dict[str, Any] | None = None, **integ: Any
) -> dict[str, Any]:
    cfg = base_config(prefix, xpertId="sales", **integ)
    cfg["experts"] = [
        {
            "id": "sales",
            "kind": "xpert",
            "baseUrl": url,
            "apiKey": API_KEY,
            "organizationId": "org-1",
            "principalUserId": "u-42",
            "connectRetries": 2,
            **(expert or {}),
        }
    ]
    cfg["admin"] = {"token": TOKEN}
    return cfg
