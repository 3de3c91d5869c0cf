"""WeCom callback crypto (docs/wecom.md, "Callback crypto") on top of wechatpy's cipher.

Signatures are compared in constant time here (wechatpy uses ``!=``) and the plaintext is
unpadded strictly with a **32-byte** PKCS#7 block: a stock 16-byte unpadder rejects pads of
17..32, which a real message hits whenever its plaintext is a multiple of 16 but not of 32.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
import struct
import time
from typing import Any

from wechatpy.crypto.base import BasePrpCrypto
from wechatpy.crypto.cryptography import WeChatCipher

from gateway.errors import GatewayError

BLOCK = 32


class CryptoError(GatewayError, ValueError):
    """A callback that fails verification; the reason is for the debug log only."""


def signature(token: str, timestamp: str, nonce: str, encrypt: str) -> str:
    return hashlib.sha1("".join(sorted([token, timestamp, nonce, encrypt])).encode()).hexdigest()


def _decrypt(key: bytes, data: bytes) -> bytes:
    """AES-256-CBC with the IV the key's first 16 bytes, PKCS#7 to a 32-byte block, strictly."""
    if not data or len(data) % 16:
        raise CryptoError("bad ciphertext length")
    plain: bytes = WeChatCipher(key).decrypt(data)
    pad = plain[-1]
    if not 1 <= pad <= BLOCK or plain[-pad:] != bytes([pad]) * pad:
        raise CryptoError("bad padding")
    return plain[:-pad]


def decrypt_media(data: bytes, key: bytes) -> bytes:
    """An AI bot's image or file download: AES-256-CBC with ``key`` (the message's own
    ``aeskey`` over the long connection, the bot's EncodingAESKey for callbacks), the IV its
    first 16 bytes, PKCS#7 to a 32-byte block (WecomTeam/aibot-node-sdk ``decryptFile``)."""
    if len(key) != 32:
        raise CryptoError("media key must be 32 bytes")
    return _decrypt(key, data)


class WeComCrypto:
    """Verify, decrypt and encrypt for one receive-id (CorpID for apps, "" for AI bots)."""

    def __init__(self, *, token: str, encoding_aes_key: str, receive_id: str) -> None:
        try:
            self.key = base64.b64decode(encoding_aes_key + "=")
        except binascii.Error as exc:
            raise ValueError("encodingAesKey is not base64") from exc
        if len(self.key) != 32:
            raise ValueError("encodingAesKey must decode to 32 bytes")
        self.token = token
        self.receive_id = receive_id

    def verify(
        self,
        msg_signature: str,
        timestamp: str,
        nonce: str,
        encrypt: str,
        *,
        window_s: int,
        now: float | None = None,
    ) -> None:
        expected = signature(self.token, timestamp, nonce, encrypt)
        if not hmac.compare_digest(expected.encode(), msg_signature.encode()):
            raise CryptoError("bad signature")
        try:
            ts = int(timestamp)
        except ValueError:
            raise CryptoError("bad timestamp") from None
        if abs((time.time() if now is None else now) - ts) > window_s:
            raise CryptoError("stale timestamp")

    def decrypt(self, encrypt: str) -> str:
        try:
            data = base64.b64decode(encrypt, validate=True)
        except binascii.Error:
            raise CryptoError("not base64") from None
        body = _decrypt(self.key, data)[16:]
        if len(body) < 4:
            raise CryptoError("truncated plaintext")
        (size,) = struct.unpack(">I", body[:4])
        if size > len(body) - 4:
            raise CryptoError("bad length field")
        msg, receive_id = body[4 : 4 + size], body[4 + size :]
        if not hmac.compare_digest(receive_id, self.receive_id.encode()):
            raise CryptoError("wrong receive-id")
        try:
            return msg.decode()
        except UnicodeDecodeError:
            raise CryptoError("plaintext is not UTF-8") from None

    def encrypt(self, text: str) -> str:
        prp = BasePrpCrypto(self.key)
        encrypted: bytes = prp._encrypt(text, self.receive_id)
        return encrypted.decode()

    def encrypted_json(self, payload: dict[str, Any], *, nonce: str | None = None) -> str:
        """An AI-bot passive reply: the encrypted JSON envelope WeCom expects."""
        plain = json.dumps(payload, ensure_ascii=False, separators=(",", ":"))
        timestamp = str(int(time.time()))
        nonce = nonce or secrets.token_hex(8)
        encrypt = self.encrypt(plain)
        return json.dumps(
            {
                "encrypt": encrypt,
                "msgsignature": signature(self.token, timestamp, nonce, encrypt),
                "timestamp": int(timestamp),
                "nonce": nonce,
            }
        )
