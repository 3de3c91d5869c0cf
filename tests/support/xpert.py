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


# What the fake XpertAI's "[kb]" run (tests/fakes/xpertai_agent.py ``retrieve``) answers once
# its citation links are footnotes: the text, then the sources the run named.
SOURCES = (
    "**Sources**\n\n- [1] Refund policy.pdf\n- [2] document doc-b\n\n"
    "(The agent did not name every source; those are listed by document id.)"
)
CITED = "Refunds take 14 days [1]. Digital goods are final [2][1].\n\n" + SOURCES


def xpert_expert(url: str) -> dict[str, Any]:
    """The ``sales`` expert of :func:`config`, for a platform test's own config."""
    expert: dict[str, Any] = config("unused", url)["experts"][0]
    return expert
