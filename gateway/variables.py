"""System variables (``sys.*``) of a turn and the prompt template that uses them."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][\w.]*)\s*\}\}")


def system_variables(
    *,
    language: str | None,
    locale: str | None,
    timezone: str | None,
    thread_id: str,
    user_id: str,
    user_email: str | None = None,
    project_id: str | None = None,
    workspace_base_url: str | None = None,
    now: datetime | None = None,
) -> dict[str, str]:
    """``sys.*`` as XpertAI defines them: the integration's language (else the sender's locale,
    else en-US), its time zone for date and datetime, and the session's thread."""
    zone = ZoneInfo(timezone) if timezone else UTC
    moment = (now or datetime.now(UTC)).astimezone(zone)
    values = {
        "sys.language": language or locale or "en-US",
        "sys.timezone": timezone or "UTC",
        "sys.date": moment.strftime("%Y-%m-%d"),
        "sys.datetime": moment.strftime("%Y-%m-%d %H:%M:%S %Z"),
        "sys.thread_id": thread_id,
        "sys.workspace_path": f"/project/{project_id}/" if project_id else f"/user/{user_id}/",
    }
    if workspace_base_url:
        values["sys.workspace_url"] = workspace_base_url.rstrip("/") + values["sys.workspace_path"]
    if user_email:
        values["sys.user_email"] = user_email
    return values


def render_template(template: str, variables: dict[str, Any]) -> str:
    """Fill ``{{name}}`` placeholders; an unknown name becomes empty text."""
    return _PLACEHOLDER.sub(lambda m: str(variables.get(m.group(1), "")), template)
