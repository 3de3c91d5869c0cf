"""The platforms' rate limits and monthly quotas, for the fake servers: an aiohttp middleware a
fake is built with (``FakeLark(limits=LarkLimits())``, ``FakeDingTalk(limits=DingTalkLimits())``).
Off unless given, so a fake built without it answers exactly as before.

Each limit is a sliding log per key (the times of the calls it admitted within its window) on an
injectable clock in milliseconds: ``tests.support.clock.FakeClock`` fits, so a test moves time
instead of sleeping; the default is ``time.monotonic``. A refused call counts against nothing
(⚠ chosen: no page says whether a throttled call uses up the window; ``count_refused=True``
makes every call count, refused or not, so a client that retries at once stays shut out: the
two bound what Lark may do). Every answer the fake gave
is kept (``answers``: API, status, code), every refusal of the limiter too (``refusals``), so a
test or a bench counts calls and throttled answers. ``enforce=False`` records without refusing.

Lark / Feishu (doc pages in the wxkingstar/doc-hub-mcp mirror, ``feishu/…``; the same pages are
on open.feishu.cn under their ``source_url``):

- DOC-RATE  003-服务端API/API-调用指南/频控策略.md (/document/server-docs/api-call-guide/
  frequency-control) l.15-28: past a limit HTTP 429, ``{"code": 99991400, "msg": "request
  trigger frequency limit"}``, headers ``x-ogw-ratelimit-limit`` (the window's cap) and
  ``x-ogw-ratelimit-reset`` (seconds to wait); l.55-57: limits apply per API, per app, per
  tenant; l.62: for "1000 次/分 & 50 次/秒" reaching either cap triggers.
- DOC-SEND  003-服务端API/消息/消息管理/发送消息.md l.21 (and 回复消息.md l.19): 5 QPS to one
  user, 5 QPS to one group shared by the bots in it; l.29: 1000/min & 50/s; the error table:
  **HTTP 400** / 230020 "This operation triggers the frequency limit." (no rate-limit headers
  shown). The message-card PATCH page (/document/server-docs/im-v1/message-card/patch) says
  "单条消息更新频控为 5 QPS" and lists the same 400 / 230020.
- DOC-CK    /document/cardkit-v1/streaming-updates-openapi-overview ("注意事项"): at most 10
  card- and element-level operations per second on one card entity; the streaming_mode field:
  "在流式更新模式下，开发者可调用卡片和组件接口对卡片持续进行全量更新、局部更新、文本流式更新，且
  不会触发接口的频率限制（QPS）": while a card's streaming_mode is on, full updates, partial
  updates and streaming text are exempt. Read here as exempt from the per-card limit only: each
  CardKit API page still names 1000/min & 50/s (⚠ the sentence could also mean the per-API
  limit). No page names the answer past 10 per card: ⚠ 429 / 99991400 as DOC-RATE.
- DOC-QUOTA 001-开发指南/平台公告/平台升级公告/自建应用-API-调用量上限调整说明.md l.15-31: the
  Basic edition's 10,000 calls a month per tenant (all its custom apps), auth and contacts (among
  others) not counted; l.63-67: over it HTTP 429 / 99991403 "This month's API call quota has been
  exceeded"; l.94-96: calls that failed with 4xx/5xx do not count.

lark-oapi 1.7.5 disagrees with these pages: its ``channel/errors.py`` files 230020 under
"target revoked" (not retryable) and 99991400 under auth denials, and its retry reads
``Retry-After``, not ``x-ogw-ratelimit-reset``. The official pages win here.

DingTalk (DOC-DT: open.dingtalk.com /document/development/how-to-process-api-throttling-on-the-
dingtalk-server, docs/dingtalk.md, "Limits"): a Standard-edition org may call each API 20 times a
second per app, past that ``Forbidden.AccessDenied.QpsLimitForAppkeyAndApi`` (90018 on the old
API). The page counts by the second ("如果当前秒调用次数超过20，会触发相应错误", its calls in the
current second; for several servers it suggests a shared counter keyed by "当前的秒级时间戳").
The fake's 1-s sliding log is the stricter reading: calls it admits never exceed 20 in any
second, however the seconds are cut, so a run it does not refuse no per-second counter would.
The HTTP status, 403, is from connector code and tests (secondary), as the fake's own
``flow_control`` uses. Monthly quota (docs/dingtalk.md, "Limits"): 5,000 calls a month on Standard,
over it ``Forbidden.AccessDenied.ApiCountLimitForOrg`` (⚠ status 403 assumed), calls refused for
QPS not counted (⚠ here: no refused call counts; the token call is not counted, assumed).
"""

from __future__ import annotations

import json
import math
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web
from aiohttp.typedefs import Handler, Middleware

from tests.fakes.dingtalk_stream import error_response

Clock = Callable[[], float]  # milliseconds; only differences matter


def monotonic_ms() -> float:
    return time.monotonic() * 1000


@dataclass(frozen=True)
class Rule:
    """At most ``limit`` calls per ``window_ms`` for each key of this rule."""

    name: str
    limit: int
    window_ms: float


@dataclass(frozen=True)
class Refusal:
    at_ms: float
    api: str  # method and route template: "PATCH /open-apis/im/v1/messages/{mid}"
    rule: str  # the Rule's name, or "quota"
    key: str
    status: int
    code: int | str
    reset_s: int | None


@dataclass(frozen=True)
class Answer:
    at_ms: float
    api: str
    path: str
    status: int
    code: int | str  # the platform's code; 0 (Lark) or "ok" (DingTalk) for a success


class SlidingLog:
    """Per key, the times of the calls admitted within the rule's window."""

    def __init__(self) -> None:
        self.times: dict[str, deque[float]] = {}

    def wait_ms(self, rule: Rule, key: str, now: float) -> float:
        """0 when one more call fits now, else the ms until one fewer is in the window."""
        times = self.times.get(f"{rule.name}|{key}")
        if not times:
            return 0.0
        while times and now - times[0] >= rule.window_ms:
            times.popleft()
        if len(times) < rule.limit:
            return 0.0
        return times[-rule.limit] + rule.window_ms - now

    def admit(self, rule: Rule, key: str, now: float) -> None:
        self.times.setdefault(f"{rule.name}|{key}", deque()).append(now)


def api_of(request: web.Request) -> str:
    """ "Per API": the method and the route's template, its ids left out."""
    resource = request.match_info.route.resource
    template = resource.canonical if resource is not None else request.path
    return f"{request.method} {template}"


def _code(resp: web.StreamResponse, ok: int | str) -> int | str:
    body = resp.body if isinstance(resp, web.Response) else None
    if isinstance(body, bytes) and resp.content_type == "application/json":
        try:
            data = json.loads(body)
        except ValueError:
            data = None
        if isinstance(data, dict) and "code" in data:
            return data["code"]  # type: ignore[no-any-return]
    return ok if resp.status < 300 else f"http_{resp.status}"


class Limits:
    """What every platform's limits share: the clock, the logs, the records, the quota count."""

    OK: int | str = 0

    def __init__(
        self,
        clock: Clock | None,
        *,
        enforce: bool,
        calls_per_month: int | None,
        count_refused: bool = False,
    ) -> None:
        self.clock = clock or monotonic_ms
        self.enforce = enforce
        self.count_refused = count_refused
        self.calls_per_month = calls_per_month
        self.month_calls = 0  # successful calls the quota counts
        self.log = SlidingLog()
        self.refusals: list[Refusal] = []
        self.answers: list[Answer] = []

    def first_full(
        self, checks: list[tuple[Rule, str]], now: float
    ) -> tuple[Rule, str, int] | None:
        """The first (rule, key) with no room now and the seconds to wait; else None. Every rule
        counts an admitted call (a refused one too with ``count_refused``)."""
        full = None
        if self.enforce:
            for rule, key in checks:
                wait = self.log.wait_ms(rule, key, now)
                if wait > 0:
                    full = rule, key, max(1, math.ceil(wait / 1000))
                    break
        if full is None or self.count_refused:
            for rule, key in checks:
                self.log.admit(rule, key, now)
        return full

    def over_quota(self, counted: bool) -> bool:
        return (
            self.enforce
            and counted
            and self.calls_per_month is not None
            and self.month_calls >= self.calls_per_month
        )

    def refused(self, refusal: Refusal, resp: web.StreamResponse, path: str) -> web.StreamResponse:
        self.refusals.append(refusal)
        self.answers.append(Answer(refusal.at_ms, refusal.api, path, resp.status, refusal.code))
        return resp

    async def answered(
        self, request: web.Request, handler: Handler, api: str, now: float, counted: bool
    ) -> web.StreamResponse:
        resp = await handler(request)
        code = _code(resp, self.OK)
        self.answers.append(Answer(now, api, request.path, resp.status, code))
        if counted and resp.status < 300 and code == self.OK:  # DOC-QUOTA: failures are free
            self.month_calls += 1
        return resp

    # --- views for tests and benches -----------------------------------------------------------
    def throttle_answer(self, answer: Answer) -> bool:
        raise NotImplementedError

    def throttled(self) -> list[Answer]:
        """Every answer that told the caller to slow down (the limiter's and the fake's own)."""
        return [a for a in self.answers if self.throttle_answer(a)]

    def by_api(self) -> dict[str, dict[str, int]]:
        """Answers counted by API, then by result code."""
        counts: Counter[tuple[str, str]] = Counter((a.api, str(a.code)) for a in self.answers)
        out: dict[str, dict[str, int]] = {}
        for (api, code), n in sorted(counts.items()):
            out.setdefault(api, {})[code] = n
        return out


class LarkState(Protocol):
    """What the limits read of a fake Lark: messages (for their chat) and CardKit cards."""

    messages: dict[str, dict[str, Any]]
    cards: dict[str, dict[str, Any]]


LARK_QUOTA_FREE = ("/open-apis/auth/", "/open-apis/contact/")  # DOC-QUOTA: auth, contacts
LARK_THROTTLE_CODES = {99991400, 230020, 99991403}


class LarkLimits(Limits):
    """Lark's limits (module docstring); every figure overridable, a test's or a tenant's."""

    def __init__(
        self,
        clock: Clock | None = None,
        *,
        per_second: int = 50,  # DOC-RATE, DOC-SEND: per API per app
        per_minute: int = 1000,
        per_chat: int = 5,  # DOC-SEND: per user / per group, sends and replies
        per_message: int = 5,  # DOC-SEND (patch page): PATCH per message
        per_card: int = 10,  # DOC-CK: operations per card entity
        calls_per_month: int | None = None,  # DOC-QUOTA: 10_000 on the Basic edition
        enforce: bool = True,
        count_refused: bool = False,
    ) -> None:
        super().__init__(
            clock, enforce=enforce, calls_per_month=calls_per_month, count_refused=count_refused
        )
        self.api_second = Rule("api_second", per_second, 1000)
        self.api_minute = Rule("api_minute", per_minute, 60_000)
        self.chat = Rule("chat", per_chat, 1000)
        self.message = Rule("message", per_message, 1000)
        self.card = Rule("card", per_card, 1000)

    def throttle_answer(self, answer: Answer) -> bool:
        return answer.status == 429 or answer.code in LARK_THROTTLE_CODES

    def middleware(self, state: LarkState) -> Middleware:
        @web.middleware
        async def limit(request: web.Request, handler: Handler) -> web.StreamResponse:
            if not request.path.startswith("/open-apis/"):
                return await handler(request)  # the long connection is not the OpenAPI
            api = api_of(request)
            checks = [(self.api_second, api), (self.api_minute, api)]
            if (local := await self._local(request, state)) is not None:
                checks.append(local)
            counted = not request.path.startswith(LARK_QUOTA_FREE)
            now = self.clock()
            if self.over_quota(counted):
                refusal = Refusal(now, api, "quota", "tenant", 429, 99991403, None)
                msg = "This month's API call quota has been exceeded"  # DOC-QUOTA
                return self.refused(refusal, self._refuse(429, 99991403, msg), request.path)
            full = self.first_full(checks, now)
            if full is None:
                return await self.answered(request, handler, api, now, counted)
            rule, key, reset_s = full
            if rule in (self.chat, self.message):  # DOC-SEND: HTTP 400, no headers shown
                resp = self._refuse(400, 230020, "This operation triggers the frequency limit.")
                code: int = 230020
            else:  # DOC-RATE (per card: ⚠ the same answer)
                headers = {
                    "x-ogw-ratelimit-limit": str(rule.limit),
                    "x-ogw-ratelimit-reset": str(reset_s),
                }
                resp = self._refuse(429, 99991400, "request trigger frequency limit", headers)
                code = 99991400
            refusal = Refusal(now, api, rule.name, key, resp.status, code, reset_s)
            return self.refused(refusal, resp, request.path)

        return limit

    async def _local(self, request: web.Request, state: LarkState) -> tuple[Rule, str] | None:
        """The per-chat, per-message or per-card rule this call falls under, with its key."""
        path, method, match = request.path, request.method, request.match_info
        if method == "POST" and path == "/open-apis/im/v1/messages":
            body = await request.json()  # read once; aiohttp keeps it for the handler
            kind = request.query.get("receive_id_type", "")
            return self.chat, f"{kind}:{body.get('receive_id')}"
        if method == "POST" and path.endswith("/reply") and "mid" in match:
            parent = state.messages.get(match["mid"])
            return (self.chat, f"chat_id:{parent['chat_id']}") if parent else None
        if method == "PATCH" and path.startswith("/open-apis/im/v1/messages/"):
            return self.message, match.get("mid", path)
        if path.startswith("/open-apis/cardkit/v1/cards/") and "cid" in match:
            card = state.cards.get(match["cid"])
            if card is not None and card.get("streaming"):
                return None  # DOC-CK: streaming mode is exempt
            return self.card, match["cid"]
        return None

    @staticmethod
    def _refuse(
        status: int, code: int, msg: str, headers: dict[str, str] | None = None
    ) -> web.Response:
        return web.json_response({"code": code, "msg": msg}, status=status, headers=headers)


DINGTALK_QUOTA_FREE = ("/v1.0/oauth2/", "/v1.0/gateway/")  # ⚠ token and stream registration
DINGTALK_THROTTLE = ("QpsLimit", "QpmLimit", "ApiCountLimit")


class DingTalkLimits(Limits):
    """DingTalk's per-app per-API QPS and the monthly quota (module docstring)."""

    OK = "ok"

    def __init__(
        self,
        clock: Clock | None = None,
        *,
        per_second: int = 20,  # DOC-DT: Standard edition
        calls_per_month: int | None = None,  # DOC-DT-BILL: 5_000 on Standard
        enforce: bool = True,
    ) -> None:
        super().__init__(clock, enforce=enforce, calls_per_month=calls_per_month)
        self.api_second = Rule("api_second", per_second, 1000)

    def throttle_answer(self, answer: Answer) -> bool:
        return answer.status == 429 or any(t in str(answer.code) for t in DINGTALK_THROTTLE)

    def middleware(self) -> Middleware:
        @web.middleware
        async def limit(request: web.Request, handler: Handler) -> web.StreamResponse:
            if not request.path.startswith("/v1.0/"):
                return await handler(request)  # webhooks, downloads, the stream socket
            api = f"{request.method} {request.path}"  # DingTalk's paths carry no ids
            counted = not request.path.startswith(DINGTALK_QUOTA_FREE)
            now = self.clock()
            if self.over_quota(counted):
                code = "Forbidden.AccessDenied.ApiCountLimitForOrg"
                refusal = Refusal(now, api, "quota", "org", 403, code, None)
                resp = error_response(403, code, "api count limit for org")
                return self.refused(refusal, resp, request.path)
            if self.first_full([(self.api_second, api)], now) is None:
                return await self.answered(request, handler, api, now, counted)
            code = "Forbidden.AccessDenied.QpsLimitForAppkeyAndApi"
            refusal = Refusal(now, api, self.api_second.name, api, 403, code, None)
            resp = error_response(403, code, "qps limit for appkey and api")
            return self.refused(refusal, resp, request.path)

        return limit
