"""GitHub webhooks: pull requests, issues, workflow runs and check suites.

Verification and headers (https://docs.github.com/en/webhooks/using-webhooks/validating-webhook-
deliveries, https://docs.github.com/en/webhooks/webhook-events-and-payloads#delivery-headers):
``X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the raw body, keyed with the secret>``,
compared in constant time; ``X-GitHub-Event`` names the event, the payload's ``action`` what
happened; ``X-GitHub-Delivery`` is a GUID that a redelivery keeps ("If you request a
redelivery, the X-GitHub-Delivery header will be the same as in the original delivery",
https://docs.github.com/en/webhooks/using-webhooks/best-practices-for-using-webhooks). The
header is not signed, so it is logged but is not the dedup id: the digest of the signed body is
(a redelivery resends the same payload). GitHub sends no timestamp header, so the replay window
is the dedup window (``runtime.dedupTtlHours``). Creating a hook sends ``ping``, answered 202
ignored.

Object keys: ``pr:<owner/repo>#<number>``, ``issue:<owner/repo>#<number>``,
``run:<owner/repo>:<workflow_run.id>`` (a re-run keeps the id and gets a new card, the first
having finished), ``suite:<owner/repo>:<check_suite.id>``. Final: a pull request or issue
closed (or an issue deleted), a workflow run or check suite completed. Payload fields as in
https://docs.github.com/en/webhooks/webhook-events-and-payloads (pull_request, issues,
workflow_run, check_suite).
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Mapping
from typing import Any

from gateway.config.event_settings import EventSource
from gateway.edge.body import HttpRequest
from gateway.errors import Refused
from gateway.triggers.sources import (
    ExternalEvent,
    Ignored,
    Source,
    delivery_header,
    field,
    first_line,
    hmac_hex,
    object_key,
    signature,
    text,
)

_EVENT = re.compile(r"^[a-z_]{1,64}$")
_STATES = {
    "synchronize": "new commits pushed",
    "ready_for_review": "ready for review",
    "converted_to_draft": "converted to draft",
    "in_progress": "in progress",
}


class GitHubSource(Source):
    name = "github"
    label = "GitHub"

    def check(self, config: EventSource, request: HttpRequest) -> None:
        if not signature(request, "X-Hub-Signature-256").startswith("sha256="):
            raise Refused(401, "X-Hub-Signature-256 is not sha256=<hex>", public="bad signature")

    def verify(self, config: EventSource, request: HttpRequest, body: bytes) -> None:
        given = signature(request, "X-Hub-Signature-256")
        expected = "sha256=" + hmac_hex(config.secret.get_secret_value(), body)
        if not hmac.compare_digest(given, expected):
            raise Refused(401, "X-Hub-Signature-256 does not match", public="bad signature")

    def delivery(self, headers: Mapping[str, str], body: bytes) -> str | None:
        delivery = delivery_header(headers, "X-GitHub-Delivery")
        if delivery is None:
            raise Refused(400, "X-GitHub-Delivery missing")
        return delivery

    def event(
        self, config: EventSource, headers: Mapping[str, str], payload: dict[str, Any]
    ) -> ExternalEvent | Ignored:
        kind = headers.get("X-GitHub-Event", "")
        if not _EVENT.match(kind):
            raise Refused(400, "X-GitHub-Event missing or malformed")
        if kind == "ping":
            return Ignored("ping")
        action = text(payload, "action", limit=64) or None
        if not config.allows(kind, action):
            return Ignored(f"{kind}.{action} is not configured" if action else kind)
        read = _READERS.get(kind)
        if read is None:
            return Ignored(f"{kind} events are not supported")
        repo = text(payload, "repository", "full_name", limit=140, required=True)
        return read(repo, action or "", payload)


def _pull_request(repo: str, action: str, payload: dict[str, Any]) -> ExternalEvent:
    pr = field(payload, "pull_request")
    number = text(payload, "number") or text(pr, "number", required=True)
    state = _STATES.get(action, action.replace("_", " "))
    if action == "closed":
        state = "closed (merged)" if field(pr, "merged") is True else "closed without merging"
    return ExternalEvent(
        type="pull_request",
        action=action,
        key=object_key(f"pr:{repo}#{number}"),
        what=f"pull request {repo}#{number}",
        state=state,
        final=action == "closed",
        title=text(pr, "title"),
        url=text(pr, "html_url", limit=500),
    )


def _issue(repo: str, action: str, payload: dict[str, Any]) -> ExternalEvent:
    issue = field(payload, "issue")
    number = text(issue, "number", required=True)
    state = action.replace("_", " ")
    reason = text(issue, "state_reason", limit=40)
    if action == "closed" and reason:
        state = f"closed ({reason.replace('_', ' ')})"
    return ExternalEvent(
        type="issues",
        action=action,
        key=object_key(f"issue:{repo}#{number}"),
        what=f"issue {repo}#{number}",
        state=state,
        final=action in ("closed", "deleted"),
        title=text(issue, "title"),
        url=text(issue, "html_url", limit=500),
    )


def _workflow_run(repo: str, action: str, payload: dict[str, Any]) -> ExternalEvent:
    run = field(payload, "workflow_run")
    name = text(run, "name", limit=100) or text(payload, "workflow", "name", limit=100)
    number = text(run, "run_number")
    branch = text(run, "head_branch", limit=100)
    title = text(run, "display_title") or first_line(text(run, "head_commit", "message"))
    return ExternalEvent(
        type="workflow_run",
        action=action,
        key=object_key(f"run:{repo}:{text(run, 'id', required=True)}"),
        what=f'workflow run "{name}"' + (f" #{number}" if number else "") + f" on {repo}",
        state=_completed(action, run),
        final=action == "completed",
        title=title + (f" ({branch})" if branch else ""),
        url=text(run, "html_url", limit=500),
    )


def _check_suite(repo: str, action: str, payload: dict[str, Any]) -> ExternalEvent:
    suite = field(payload, "check_suite")
    branch = text(suite, "head_branch", limit=100)
    sha = text(suite, "head_sha", limit=40)[:7]
    app = text(suite, "app", "name", limit=100)
    return ExternalEvent(
        type="check_suite",
        action=action,
        key=object_key(f"suite:{repo}:{text(suite, 'id', required=True)}"),
        what=f"check suite on {repo}" + (f" ({branch} @ {sha})" if sha else ""),
        state=_completed(action, suite),
        final=action == "completed",
        title=f"checks by {app}" if app else "",
        url=text(payload, "repository", "html_url", limit=500),
    )


def _completed(action: str, run: Any) -> str:
    if action != "completed":
        return _STATES.get(action, action.replace("_", " "))
    conclusion = text(run, "conclusion", limit=40)
    return f"completed: {conclusion.replace('_', ' ')}" if conclusion else "completed"


_READERS = {
    "pull_request": _pull_request,
    "issues": _issue,
    "workflow_run": _workflow_run,
    "check_suite": _check_suite,
}
