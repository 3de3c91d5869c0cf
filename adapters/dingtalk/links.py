"""The buttons of markdown messages: links to ``/api/dingtalk/action/{integrationId}?t=<token>``
carrying a signed, expiring token (``crypto.sign_action``).

A GET changes nothing: link prefetchers, previewers and scanners follow GETs, so opening the link
shows a page whose one button POSTs the token back (the same route), and only that POST is the
click. The token is the whole authority (no cookie, no session): a page elsewhere that made a
browser POST one would need the token already, and whoever has it can POST it themselves. The
POST is still refused when the browser says it comes from another site (``Origin`` other than
``server.publicUrl``'s, ``Sec-Fetch-Site: cross-site`` / ``same-site``), and the page may not be
framed. The same link (however its token is spelled) is one click: its event id is the token's
signed part, remembered for ``runtime.dedupTtlHours`` (at least 8 h), and a token lives at most
``actionTokenTtlSeconds`` (at most 8 h), so no link outlives the record of its click."""

from __future__ import annotations

import html
from collections.abc import Mapping
from typing import Any
from urllib.parse import parse_qs

from aiohttp import web

from adapters.dingtalk.crypto import BadSignature, verify_action
from adapters.dingtalk.events import action_envelope, link_event_id
from adapters.dingtalk.inbound import RobotAdapter
from adapters.dingtalk.settings import origin_of
from gateway.edge.body import HttpRequest, ascii_text, utf8
from gateway.edge.ingest import IngestOutcome
from gateway.edge.webhook import Webhook
from gateway.envelope import Envelope
from gateway.errors import Refused

PATH = "/api/dingtalk/action/{integrationId}"
FORM = "application/x-www-form-urlencoded"
MAX_TOKEN = 4096  # verify_action's own bound
_HEADERS = {
    "Cache-Control": "no-store",
    # No script, no resource, no frame; the form posts to this origin only.
    "Content-Security-Policy": "default-src 'none'; style-src 'unsafe-inline'; "
    "form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    # The page's URL holds the token: it goes to this origin only (and a same-origin POST still
    # carries its Origin, which "no-referrer" would turn into "null").
    "Referrer-Policy": "same-origin",
}
_PAGE = """<!doctype html><html><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width,initial-scale=1"><title>{title}</title></head>
<body style="font-family:sans-serif;text-align:center;padding:3em 1em">
<h2>{title}</h2><p>{detail}</p>{form}</body></html>"""
_FORM = """<form method="post" action="{action}">
<input type="hidden" name="t" value="{token}">
<button type="submit" style="font-size:1.2em;padding:.6em 2em">{label}</button></form>"""
# action -> (question, button) on the page a GET shows; (title) once the POST did it.
_ASK = {
    "stop": ("Stop the answer being written?", "Stop"),
    "new": ("Start a new conversation?", "New conversation"),
    "confirm": ("Confirm?", "Confirm"),
    "reject": ("Reject?", "Reject"),
    "retry": ("Try again?", "Retry"),
    "routine_confirm": ("Schedule this routine?", "Confirm"),
    "routine_cancel": ("Cancel this routine?", "Cancel"),
}
_DONE = {
    "stop": "Stop requested",
    "new": "New conversation started",
    "confirm": "Confirmed",
    "reject": "Rejected",
    "routine_confirm": "Scheduled",
    "routine_cancel": "Cancelled",
}


def _page(status: int, title: str, detail: str, form: str = "") -> web.Response:
    body = _PAGE.format(title=html.escape(title), detail=html.escape(detail), form=form)
    return web.Response(status=status, text=body, content_type="text/html", headers=_HEADERS)


def _claims(adapter: RobotAdapter, token: str) -> dict[str, Any]:
    secret = adapter.settings.client_secret.get_secret_value()
    try:
        return verify_action(secret, token, now_s=adapter.clock())
    except BadSignature as exc:
        raise Refused(403, str(exc)) from None


class _Link(Webhook[RobotAdapter, Any]):
    platform = "dingtalk"

    def refusal(self, rejected: Refused) -> web.StreamResponse:
        if rejected.status >= 500:
            return _page(503, "Please try again", "The gateway is busy; reload in a moment.")
        if rejected.status == 404:
            return _page(404, "This link is not valid", "The bot it was for is not configured.")
        return _page(403, "This link is not valid", "It may have expired. Ask again in chat.")


class LinkPage(_Link):
    """GET: the token checked, and a page asking to confirm; nothing is stored or done."""

    def verify(
        self, adapter: RobotAdapter, request: HttpRequest, body: bytes
    ) -> tuple[str, dict[str, Any]]:
        token = ascii_text(request.query.get("t"), "token", status=403)
        return token, _claims(adapter, token)

    async def parse(
        self, adapter: RobotAdapter, payload: tuple[str, dict[str, Any]]
    ) -> web.StreamResponse:
        token, claims = payload
        question, label = _ASK.get(str(claims.get("a")), ("Continue?", "Continue"))
        form = _FORM.format(
            # relative: the route's own path however publicUrl prefixes it, without the query
            action=html.escape(adapter.integration_id),
            token=html.escape(token),
            label=html.escape(label),
        )
        return _page(200, question, "", form)


class LinkClick(_Link):
    """POST: the form's token becomes an action Envelope (the click)."""

    def check(self, adapter: RobotAdapter, request: HttpRequest) -> None:
        site = request.headers.get("Sec-Fetch-Site")
        if site is not None and site not in ("same-origin", "none"):
            raise Refused(403, f"posted from another site (Sec-Fetch-Site {site[:20]!r})")
        origin = request.headers.get("Origin")
        own = origin_of(adapter.context.public_url or "")
        if origin is not None and (own is None or origin != own):
            raise Refused(403, "posted from another origin")
        ctype = request.headers.get("Content-Type", "").partition(";")[0].strip().lower()
        if ctype != FORM:
            raise Refused(403, "not a form post")

    def verify(self, adapter: RobotAdapter, request: HttpRequest, body: bytes) -> Envelope:
        if len(body) > MAX_TOKEN + 16:
            raise Refused(403, "form too large")
        try:
            tokens = parse_qs(utf8(body), max_num_fields=4, strict_parsing=True).get("t", [])
        except ValueError:
            raise Refused(403, "malformed form") from None
        if len(tokens) != 1:
            raise Refused(403, "no token, or more than one")
        token = ascii_text(tokens[0], "token", status=403)
        claims = _claims(adapter, token)
        try:
            return action_envelope(
                integration_id=adapter.integration_id,
                event_id=link_event_id(token.partition(".")[0]),
                action_id=str(claims["a"]),
                conversation=str(claims["c"]),
                turn_id=str(claims["tu"]),
                chat_id=str(claims["ch"]),
                group=bool(claims["g"]),
                sender_id=str(claims.get("u") or ""),
                message_id=str(claims.get("m") or ""),
                extras={
                    "conversationId": claims["ch"],
                    "conversationType": "2" if claims["g"] else "1",
                    "senderStaffId": claims.get("u"),
                },
            )
        except (KeyError, ValueError):
            raise Refused(403, "bad claims") from None

    async def parse(self, adapter: RobotAdapter, payload: Envelope) -> Envelope:
        return payload

    async def answer(
        self,
        adapter: RobotAdapter,
        payload: Envelope,
        envelope: Envelope,
        outcome: IngestOutcome,
    ) -> web.StreamResponse:
        assert envelope.action is not None
        if outcome.notice:  # refused: not the clicker's to answer (gateway/turns/approval.py)
            return _page(403, "Not yours to answer", outcome.notice)
        title = _DONE.get(envelope.action.id, "Done")
        if outcome.status == "duplicate":
            title = "Already done"
        return _page(200, title, "You can close this page and return to DingTalk.")


def setup_routes(app: web.Application, adapters: Mapping[str, RobotAdapter]) -> None:
    app.router.add_get(PATH, LinkPage(adapters).handle)
    app.router.add_post(PATH, LinkClick(adapters).handle)
