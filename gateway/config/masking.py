"""Credentials in URLs (``https://user:token@host/…``) kept out of what the gateway shows and
stores (issue 36): ``check -v`` prints the config with them masked, and a session's snapshot
stores its expert's URLs masked; the expert rebuilt from a snapshot takes the current config's
URL back when it is the same once masked (as it takes the secrets back:
``gateway.config.settings.rebuild_expert``)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

MASK = "***"
# scheme://userinfo@ : userinfo has no "/", "?", "#" or "@" (RFC 3986, section 3.2.1).
_USERINFO = re.compile(r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.-]*://)(?P<userinfo>[^/?#@\s]+)@")


def mask_url(text: str) -> str:
    """``text`` with the credentials of each URL in it masked."""
    return _USERINFO.sub(lambda m: f"{m['scheme']}{MASK}@", text)


def mask_urls(node: Any) -> Any:
    """A JSON value with every string's URL credentials masked."""
    if isinstance(node, str):
        return mask_url(node)
    if isinstance(node, Mapping):
        return {k: mask_urls(v) for k, v in node.items()}
    if isinstance(node, list | tuple):
        return [mask_urls(v) for v in node]
    return node


def unmask(stored: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, Any]:
    """``stored`` (a snapshot's masked values) with each top-level value that ``current`` has
    in clear, and that masks to the same, put back."""
    out = dict(stored)
    for key, value in stored.items():
        now = current.get(key)
        if now is not None and now != value and mask_urls(now) == value:
            out[key] = now
    return out
