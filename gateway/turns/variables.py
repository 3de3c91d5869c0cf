"""System variables (``sys.*``) of a turn and the prompt template that uses them."""

from __future__ import annotations

from datetime import UTC, datetime
from zoneinfo import ZoneInfo

_CLOCK_TEXT: dict[tuple[str | None, int], tuple[str, str]] = {}


def _clock_text(timezone: str | None, now: datetime) -> tuple[str, str]:
    """``sys.date`` and ``sys.datetime`` of ``now`` in ``timezone``: formatted once a second
    per zone (every turn of that second reads the same text)."""
    key = (timezone, int(now.timestamp()))
    text = _CLOCK_TEXT.get(key)
    if text is None:
        moment = now.astimezone(ZoneInfo(timezone) if timezone else UTC)
        text = moment.strftime("%Y-%m-%d"), moment.strftime("%Y-%m-%d %H:%M:%S %Z")
        if len(_CLOCK_TEXT) >= 64:
            _CLOCK_TEXT.clear()
        _CLOCK_TEXT[key] = text
    return text


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
    date, stamp = _clock_text(timezone, now or datetime.now(UTC))
    values = {
        "sys.language": language or locale or "en-US",
        "sys.timezone": timezone or "UTC",
        "sys.date": date,
        "sys.datetime": stamp,
        "sys.thread_id": thread_id,
        "sys.workspace_path": f"/project/{project_id}/" if project_id else f"/user/{user_id}/",
    }
    if workspace_base_url:
        values["sys.workspace_url"] = workspace_base_url.rstrip("/") + values["sys.workspace_path"]
    if user_email:
        values["sys.user_email"] = user_email
    return values
