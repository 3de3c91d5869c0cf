"""GitLab webhooks: merge requests and pipelines.

Verification (https://docs.gitlab.com/user/project/integrations/webhooks/#create-a-webhook):
GitLab sends the webhook's secret token as it is in ``X-Gitlab-Token``; it is compared with the
configured one in constant time, before the body is read.

Dedup (https://docs.gitlab.com/user/project/integrations/webhooks/#delivery-headers):
``Idempotency-Key`` is "unique ID consistent across webhook retries" (GitLab 17.4 and later);
it is logged. ``X-Gitlab-Event-UUID`` is not used: "recursive webhooks (triggered by earlier
webhooks) share the same value". The dedup id is a hash of the raw body, as for the other
sources (a header can be changed by whoever replays a body): a retry resends the same bytes, and
two events differ at least in their timestamps.

Payloads (https://docs.gitlab.com/user/project/integrations/webhook_events/): the type is
``object_kind``; ``merge_request`` with ``object_attributes.action`` (open, close, reopen,
update, approval, approved, unapproval, unapproved, merge) and ``state``; ``pipeline`` with
``object_attributes.status``. Object keys: ``mr:<project path>!<iid>`` and
``pipeline:<project path>:<id>``. Final: a merge request merged or closed, a pipeline success,
failed, canceled or skipped. For the ``types`` allow-list a pipeline's action is its status.
"""

from __future__ import annotations

import hmac
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
    object_key,
    signature,
    text,
)

_MR_STATES = {
    "open": "opened",
    "reopen": "reopened",
    "update": "updated",
    "merge": "merged",
    "close": "closed",
}
FINAL_PIPELINE = frozenset({"success", "failed", "canceled", "skipped"})


class GitLabSource(Source):
    name = "gitlab"
    label = "GitLab"

    def check(self, config: EventSource, request: HttpRequest) -> None:
        given = signature(request, "X-Gitlab-Token").encode()
        if not hmac.compare_digest(given, config.secret.get_secret_value().encode()):
            raise Refused(401, "X-Gitlab-Token does not match", public="bad token")

    def verify(self, config: EventSource, request: HttpRequest, body: bytes) -> None:
        """The token was checked before the body was read; GitLab signs nothing else."""

    def delivery(self, headers: Mapping[str, str], body: bytes) -> str | None:
        return delivery_header(headers, "Idempotency-Key")

    def event(
        self, config: EventSource, headers: Mapping[str, str], payload: dict[str, Any]
    ) -> ExternalEvent | Ignored:
        kind = text(payload, "object_kind", limit=64, required=True)
        attrs = field(payload, "object_attributes")
        if kind == "merge_request":
            action = text(attrs, "action", limit=40) or None
        elif kind == "pipeline":
            action = text(attrs, "status", limit=40) or None
        else:
            return Ignored(f"{kind} events are not supported")
        if not config.allows(kind, action):
            return Ignored(f"{kind}.{action} is not configured" if action else kind)
        project = text(payload, "project", "path_with_namespace", limit=200, required=True)
        if kind == "merge_request":
            return _merge_request(project, action or "", attrs)
        return _pipeline(project, action or "", payload)


def _merge_request(project: str, action: str, attrs: Any) -> ExternalEvent:
    iid = text(attrs, "iid", required=True)
    state = text(attrs, "state", limit=40)
    return ExternalEvent(
        type="merge_request",
        action=action,
        key=object_key(f"mr:{project}!{iid}"),
        what=f"merge request {project}!{iid}",
        state=_MR_STATES.get(action, action or state),
        final=action in ("merge", "close") or state in ("merged", "closed"),
        title=text(attrs, "title"),
        url=text(attrs, "url", limit=500),
    )


def _pipeline(project: str, status: str, payload: dict[str, Any]) -> ExternalEvent:
    attrs = field(payload, "object_attributes")
    pipeline_id = text(attrs, "id", required=True)
    ref = text(attrs, "ref", limit=100)
    return ExternalEvent(
        type="pipeline",
        action=status,
        key=object_key(f"pipeline:{project}:{pipeline_id}"),
        what=f"pipeline #{pipeline_id} of {project}" + (f" ({ref})" if ref else ""),
        state=status or "unknown",
        final=status in FINAL_PIPELINE,
        title=text(attrs, "name") or text(payload, "commit", "title"),
        url=text(attrs, "url", limit=500),
    )
