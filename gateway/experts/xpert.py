"""XpertAI agents through the Agent-Protocol API (reference/xpertai.md §6): one thread per
session, each turn a ``runs/stream`` SSE whose frames become run events."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import structlog

from gateway.events import (
    Finished,
    Interrupt,
    Outcome,
    RunEvent,
    Started,
    StepEvent,
    StepStatus,
    TextDelta,
    ToolEvent,
    VariablesEvent,
)
from gateway.experts.base import Decision, Expert, TurnInput
from gateway.experts.http import ExpertHttpError, error_for
from gateway.experts.sse import SseEvent, read_sse
from gateway.settings import XpertExpertSettings

log = structlog.get_logger("gateway.experts.xpert")
END_STATUS: dict[str, Outcome] = {
    "success": "success",
    "error": "error",
    "interrupted": "interrupted",
}


class XpertExpert(Expert):
    kind = "xpert"

    def __init__(self, *, settings: XpertExpertSettings) -> None:
        self.settings = settings
        self._http: aiohttp.ClientSession | None = None
        self._runs: dict[str, tuple[str, str]] = {}  # turn id -> (thread id, run id)

    @property
    def assistant_id(self) -> str:
        return self.settings.assistant_id or self.settings.id

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            s = self.settings
            headers = {"x-api-key": s.api_key.get_secret_value(), "Accept": "text/event-stream"}
            if s.organization_id:
                headers["organization-id"] = s.organization_id
            if s.principal_user_id:
                headers["x-principal-user-id"] = s.principal_user_id
            self._http = aiohttp.ClientSession(
                headers=headers, timeout=aiohttp.ClientTimeout(total=None, sock_connect=10)
            )
        return self._http

    async def _thread(self, turn: TurnInput) -> str:
        if turn.expert_thread_id:
            return turn.expert_thread_id
        body = {
            "metadata": {
                "gatewaySession": turn.session_id,
                "integrationId": turn.integration_id,
                "chatId": turn.chat_id,
            }
        }
        async with self._session().post(f"{self.settings.base_url}/threads", json=body) as resp:
            if resp.status not in (200, 201):
                raise await error_for(resp, "XpertAI")
            data = await resp.json()
        return str(data["thread_id"])

    def _state(self, turn: TurnInput) -> dict[str, Any]:
        state: dict[str, Any] = dict(turn.state)
        if turn.group_history:
            state["group_history"] = [
                {"name": m["name"], "text": m["text"]} for m in turn.group_history
            ]
        for key, value in turn.variables.items():
            if not key.startswith("sys."):
                state[key] = value
        return state

    async def run(self, turn: TurnInput) -> AsyncIterator[RunEvent]:
        body_input = {
            "action": "send",
            "message": {
                "input": {
                    "input": turn.text,
                    "files": [a for a in turn.attachments if a.get("url")],
                }
            },
            "state": self._state(turn),
        }
        async for event in self._turn(turn, body_input):
            yield event

    async def resume(
        self, turn: TurnInput, decision: Decision, interrupt: dict[str, Any]
    ) -> AsyncIterator[RunEvent]:
        body_input = {
            "action": "resume",
            "decision": {"type": decision},
            "state": self._state(turn),
        }
        async for event in self._turn(turn, body_input):
            yield event

    async def _turn(self, turn: TurnInput, body_input: dict[str, Any]) -> AsyncIterator[RunEvent]:
        try:
            thread_id = await self._thread(turn)
        except (ExpertHttpError, aiohttp.ClientError, TimeoutError) as exc:
            yield Finished("error", _user_error(exc))
            return
        yield Started(run_id=turn.turn_id, thread_id=thread_id)
        body = {
            "assistant_id": self.assistant_id,
            "input": body_input,
            "context": {
                "integrationId": turn.integration_id,
                "chatId": turn.chat_id,
                "senderId": turn.sender_id,
            },
        }
        try:
            async for event in self._stream(turn, thread_id, body):
                yield event
                if isinstance(event, Finished):
                    return
        except (ExpertHttpError, aiohttp.ClientError, TimeoutError) as exc:
            log.error("xpert run failed", error=str(exc), thread_id=thread_id)
            yield Finished("error", _user_error(exc))
            return
        yield Finished("success")
        self._runs.pop(turn.turn_id, None)

    async def _stream(
        self, turn: TurnInput, thread_id: str, body: dict[str, Any]
    ) -> AsyncIterator[RunEvent]:
        """Open the run (retrying connect errors before the first byte), then follow it; a
        dropped stream is resumed from the last event id."""
        s = self.settings
        url = f"{s.base_url}/threads/{thread_id}/runs/stream"
        last_id: str | None = None
        run_id: str | None = None
        asked = False  # on_interrupt and on_conversation_end(interrupted) ask only once
        delay = 0.5
        for attempt in range(s.connect_retries + 1):
            try:
                if run_id is None:
                    request = self._session().post(url, json=body)
                else:
                    headers = {"Last-Event-ID": last_id} if last_id else {}
                    request = self._session().get(
                        f"{s.base_url}/threads/{thread_id}/runs/{run_id}/stream", headers=headers
                    )
                async with request as resp:
                    if resp.status != 200:
                        raise await error_for(resp, "XpertAI")
                    run_id = run_id or _run_id(resp)
                    if run_id:
                        self._runs[turn.turn_id] = (thread_id, run_id)
                    events = read_sse(resp)
                    while True:
                        try:
                            sse = await asyncio.wait_for(anext(events), s.idle_timeout_seconds)
                        except StopAsyncIteration:
                            return
                        except TimeoutError:
                            # Abandon the connection: leaving the context manager normally
                            # would wait for a response the server is still holding open.
                            resp.close()
                            raise ExpertHttpError(
                                f"XpertAI sent nothing for {s.idle_timeout_seconds:g} s."
                            ) from None
                        last_id = sse.id or last_id
                        for event in self._events(sse):
                            if isinstance(event, Interrupt):
                                if asked:
                                    continue
                                asked = True
                            yield event
                            if isinstance(event, Finished):
                                return
                        if sse.event == "complete":
                            return
            except ExpertHttpError as exc:
                if not exc.retryable or attempt == s.connect_retries:
                    raise
            except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
                if attempt == s.connect_retries or (run_id is None and last_id is not None):
                    raise ExpertHttpError(
                        f"XpertAI connection lost ({type(exc).__name__})."
                    ) from exc
                log.warning("xpert stream dropped; resuming", run_id=run_id, last_event=last_id)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 8)

    def _events(self, sse: SseEvent) -> list[RunEvent]:
        if sse.event == "complete" or not sse.data.strip():
            return []
        try:
            frame = json.loads(sse.data)
        except json.JSONDecodeError:
            return []
        if frame.get("type") == "message":
            return self._message(frame.get("data"))
        if frame.get("type") == "event":
            return _event(str(frame.get("event", "")), frame.get("data") or {})
        return []

    def _message(self, data: Any) -> list[RunEvent]:
        if isinstance(data, str):
            return [TextDelta(data)] if data else []
        if isinstance(data, dict):
            if data.get("type") == "text" and data.get("text"):
                return [TextDelta(str(data["text"]))]
            if data.get("type") == "reasoning" and self.settings.show_reasoning:
                return [StepEvent("reasoning", "Reasoning", "running", str(data.get("text", "")))]
        return []

    supports_steer = True

    async def steer(self, turn: TurnInput, text: str) -> None:
        """``follow_up`` / ``steer`` into the thread's running run (reference/xpertai.md §6)."""
        ids = self._runs.get(turn.turn_id)
        thread_id = ids[0] if ids else turn.expert_thread_id
        if not thread_id:
            raise ExpertHttpError("the run has no thread yet")
        body = {
            "assistant_id": self.assistant_id,
            "input": {
                "action": "follow_up",
                "mode": "steer",
                "message": {"input": {"input": text}},
            },
        }
        async with self._session().post(
            f"{self.settings.base_url}/threads/{thread_id}/runs", json=body
        ) as resp:
            if resp.status not in (200, 201, 202):
                raise await error_for(resp, "XpertAI")

    async def cancel(self, turn: TurnInput) -> None:
        ids = self._runs.pop(turn.turn_id, None)
        if ids is None:
            return
        thread_id, run_id = ids
        url = f"{self.settings.base_url}/threads/{thread_id}/runs/{run_id}/cancel"
        try:
            async with self._session().post(url) as resp:
                if resp.status >= 400:
                    log.warning("xpert cancel refused", status=resp.status, run_id=run_id)
        except aiohttp.ClientError as exc:
            log.warning("xpert cancel failed", error=str(exc), run_id=run_id)

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()


def _run_id(resp: aiohttp.ClientResponse) -> str | None:
    # Agent Protocol servers name the run in Content-Location: /threads/{tid}/runs/{run_id}
    location = resp.headers.get("Content-Location", "")
    if "/runs/" in location:
        return location.rstrip("/").rsplit("/", 1)[-1].split("?")[0] or None
    return None


def _event(name: str, data: dict[str, Any]) -> list[RunEvent]:
    ident = str(data.get("id") or data.get("tool_call_id") or data.get("run_id") or name)
    if name == "on_tool_start":
        return [ToolEvent(ident, str(data.get("name") or data.get("tool") or "tool"), "running")]
    if name in ("on_tool_end", "on_tool_error"):
        status: StepStatus = "done" if name == "on_tool_end" else "failed"
        return [
            ToolEvent(
                ident,
                str(data.get("name") or data.get("tool") or "tool"),
                status,
                str(data.get("error") or ""),
            )
        ]
    if name == "on_chat_event":
        title = str(data.get("title") or data.get("message") or data.get("name") or "Working")
        raw = str(data.get("status") or "running").lower()
        step: StepStatus = "running"
        if raw in ("success", "done", "completed"):
            step = "done"
        elif raw in ("fail", "failed", "error"):
            step = "failed"
        return [StepEvent(ident, title, step, str(data.get("detail") or ""))]
    if name == "on_interrupt":
        prompt = str(data.get("message") or data.get("title") or "Please confirm to continue.")
        return [Interrupt(prompt=prompt, data=data)]
    if name == "on_conversation_end":
        outcome: Outcome = END_STATUS.get(str(data.get("status", "success")), "error")
        if outcome == "interrupted":
            prompt = str((data.get("operation") or {}).get("message") or "Please confirm.")
            return [Interrupt(prompt=prompt, data=data), Finished("interrupted")]
        return [Finished(outcome, str(data.get("error") or ""))]
    if name == "on_error":
        return [Finished("error", str(data.get("error") or data.get("message") or "agent error"))]
    if name == "on_state" and isinstance(data.get("state"), dict):
        return [VariablesEvent(values=dict(data["state"]))]
    return []


def _user_error(exc: BaseException) -> str:
    if isinstance(exc, ExpertHttpError):
        return str(exc)
    return f"XpertAI could not be reached ({type(exc).__name__})."
