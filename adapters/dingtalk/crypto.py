"""HTTP-mode signature checks and the signed, expiring tokens carried by button links.

Both use the app secret as the HMAC key and compare in constant time; clocks are injected so
tests can move time (docs/architecture.md, "The edge").
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from typing import Any

from gateway.errors import GatewayError

SIGN_WINDOW_MS = 3_600_000  # the most DingTalk's doc allows: reject |now - timestamp| > 1 h


class BadSignature(GatewayError, ValueError):
    """A request or token that did not verify; the message is safe to log."""


def robot_sign(secret: str, timestamp: str) -> str:
    """``base64(HMAC-SHA256(key=appSecret, msg=f"{timestamp}\\n{appSecret}"))`` (docs/dingtalk.md,
    "HTTP mode")."""
    digest = hmac.new(secret.encode(), f"{timestamp}\n{secret}".encode(), hashlib.sha256).digest()
    return base64.b64encode(digest).decode()


def verify_robot_sign(
    secret: str,
    timestamp: str | None,
    sign: str | None,
    *,
    now_ms: int,
    window_ms: int = SIGN_WINDOW_MS,
) -> None:
    """An HTTP-mode request's headers (docs/dingtalk.md, "HTTP mode"). The sign covers the timestamp
    and nothing else: it proves that DingTalk made a request at that time, not that this body is the
    one it sent."""
    if not timestamp or not sign:
        raise BadSignature("missing timestamp or sign header")
    if not timestamp.isascii() or not timestamp.isdigit() or not sign.isascii():
        raise BadSignature("timestamp or sign is not ASCII digits / base64")
    if len(timestamp) > 15 or abs(now_ms - int(timestamp)) > window_ms:
        raise BadSignature(f"timestamp outside the {window_ms // 1000} s window")
    if not hmac.compare_digest(robot_sign(secret, timestamp).encode(), sign.encode()):
        raise BadSignature("sign mismatch")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def sign_action(secret: str, claims: dict[str, Any], *, expires_at: int) -> str:
    """A compact ``payload.mac`` token; ``expires_at`` is epoch seconds."""
    body = json.dumps({**claims, "exp": expires_at}, separators=(",", ":"), sort_keys=True)
    payload = _b64(body.encode())
    mac = hmac.new(secret.encode(), b"dingtalk-action." + payload.encode(), hashlib.sha256)
    return f"{payload}.{_b64(mac.digest())}"


def verify_action(secret: str, token: str, *, now_s: float) -> dict[str, Any]:
    """The token's claims, or BadSignature when it is forged, malformed or expired."""
    payload, _, mac = token.partition(".")
    if not payload or not mac or len(token) > 4096 or not token.isascii():
        raise BadSignature("malformed token")
    want = hmac.new(secret.encode(), b"dingtalk-action." + payload.encode(), hashlib.sha256)
    try:
        given = _unb64(mac)
    except (binascii.Error, ValueError):
        raise BadSignature("malformed token") from None
    if not hmac.compare_digest(want.digest(), given):
        raise BadSignature("token signature mismatch")
    if _b64(given) != mac:  # one spelling per token: "=" padding or other trailing bits refused
        raise BadSignature("malformed token")
    try:
        claims = json.loads(_unb64(payload))
    except (binascii.Error, ValueError):
        raise BadSignature("malformed token") from None
    if not isinstance(claims, dict) or not isinstance(claims.get("exp"), int):
        raise BadSignature("malformed token")
    if claims["exp"] < now_s:
        raise BadSignature("token expired")
    return claims
