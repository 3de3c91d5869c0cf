"""A steer of a running XpertAI run: ``POST /threads/{t}/runs`` with ``follow_up`` / ``steer``
aimed at the running execution, its files as a send's (issue 37 item 4).

The real server (xpert-ai/xpert @0021e606,
``packages/server-ai/src/xpert/commands/handlers/chat.handler.ts``, the ``follow_up`` branch)
takes ``message.input.files`` as the follow-up human message's ``attachments``, and files alone
are an input ("Follow-up input is required" only without text, references and files); when the
run ends before taking the steer, the ``send`` with its ``clientMessageId`` runs the stored
input, files included (``packages/server-ai/src/shared/agent/persisted-follow-up.ts``).
"""

from __future__ import annotations

import uuid
from dataclasses import replace
from typing import Any

import aiohttp

from gateway.events import RunEvent, StepEvent
from gateway.experts.base import TurnInput
from gateway.experts.http import error_for
from gateway.experts.xpert_files import upload_files
from gateway.experts.xpert_input import files_of
from gateway.experts.xpert_settings import XpertExpertSettings


async def follow_up(
    http: aiohttp.ClientSession,
    settings: XpertExpertSettings,
    turn: TurnInput,
    text: str,
    *,
    thread_id: str,
    target: dict[str, Any],
    headers: dict[str, str],
) -> tuple[str, tuple[RunEvent, ...]]:
    """Send the steer (``turn.attachments``: the steered messages' own, fetched): pictures
    inline, other files uploaded first as for a send. Answers its ``clientMessageId`` and the
    upload steps for the run's card (their ids its own, apart from the run's file steps)."""
    client_id = uuid.uuid4().hex
    files = files_of(turn)
    shown = [
        replace(e, id=f"steer:{client_id[:8]}:{e.id}") if isinstance(e, StepEvent) else e
        async for e in upload_files(http, settings, turn, headers, thread_id, files)
    ]
    message: dict[str, Any] = {"input": text}
    if files:
        message["files"] = files
    body = {
        "assistant_id": settings.assistant_id or settings.id,
        "input": {
            "action": "follow_up",
            "mode": "steer",
            "target": target,
            "message": {"clientMessageId": client_id, "input": message},
        },
    }
    url = f"{settings.base_url}/threads/{thread_id}/runs"
    async with http.post(url, json=body, headers=headers) as resp:
        if not 200 <= resp.status < 300:
            raise await error_for(resp, "XpertAI")
    return client_id, tuple(shown)
