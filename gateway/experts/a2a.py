"""Any A2A (Agent2Agent protocol 1.0) agent: the card at ``/.well-known/agent-card.json`` says
where and how to reach it (JSON-RPC or HTTP+JSON, streaming or not: ``a2a_protocol``); a
session is one A2A context, a turn one message. A task that stops in ``input-required`` shows
its question, and the chat's next message goes to the same task (its ids are kept as the
session's backend thread, ``<contextId>|<taskId>``); ``auth-required`` and failures end the
turn with an error card; Stop cancels the task.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any, Literal

import aiohttp
import structlog
from pydantic import Field, SecretStr, field_validator

from gateway.config.bases import ExpertBase
from gateway.config.model import http_url
from gateway.events import Clarification, Decision, Finished, RunEvent, Started
from gateway.experts.a2a_protocol import (
    AUTH,
    CANCELED,
    CARD_PATH,
    DONE,
    FAILED,
    VERSION,
    WAITING,
    A2AStream,
    CardError,
    Endpoint,
    endpoint_of,
    message,
)
from gateway.experts.base import Expert, ExpertContext, TurnInput
from gateway.experts.http import ExpertHttpError, error_for, user_error
from gateway.experts.probes import probe_a2a
from gateway.experts.sse import COMMENT, read_sse

log = structlog.get_logger("gateway.experts.a2a")
CARD_TTL_S = 300.0  # how long a read agent card is used before it is read again


class A2AExpertSettings(ExpertBase):
    """An agent speaking A2A 1.0 (JSON-RPC or HTTP+JSON, as its agent card says)."""

    kind: Literal["a2a"]
    url: str = Field(description="The agent's base URL; its card at /.well-known/agent-card.json")
    headers: dict[str, SecretStr] = Field(
        default_factory=dict, description="Sent with every request, e.g. Authorization"
    )
    attachments: bool = Field(
        False, description="Pass pictures and files to the agent as raw message parts"
    )
    connect_retries: int = Field(3, ge=0, le=10, description="Retries before the task started")
    idle_timeout_seconds: float = Field(
        120, gt=0, description="A stream silent this long ends the turn with an error"
    )

    @field_validator("url")
    @classmethod
    def _url(cls, value: str) -> str:
        return http_url(value)

    @property
    def base_url(self) -> str:  # the answer's files may come from the agent's own origin
        return self.url


def split_thread(thread: str | None) -> tuple[str | None, str | None]:
    """(contextId, taskId waiting for input) of a session's backend thread."""
    if not thread:
        return None, None
    context_id, _, task_id = thread.partition("|")
    return context_id or None, task_id or None


class A2AExpert(Expert):
    kind = "a2a"
    settings_model = A2AExpertSettings
    probe = classmethod(probe_a2a)  # check --probe (gateway/experts/probes.py)

    def __init__(self, *, settings: A2AExpertSettings) -> None:
        self.settings = settings
        self.accepts_images = self.accepts_files = settings.attachments
        self._http: aiohttp.ClientSession | None = None
        self._card: tuple[float, Endpoint] | None = None
        self._tasks: dict[str, tuple[Endpoint, str]] = {}  # turn id -> its task, for Stop

    @classmethod
    def create(cls, *, settings: ExpertBase, context: ExpertContext) -> A2AExpert:
        assert isinstance(settings, A2AExpertSettings)
        return cls(settings=settings)

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            headers = {k: v.get_secret_value() for k, v in self.settings.headers.items()}
            headers["A2A-Version"] = VERSION
            self._http = aiohttp.ClientSession(
                headers=headers, timeout=aiohttp.ClientTimeout(total=None, sock_connect=10)
            )
        return self._http

    async def _endpoint(self) -> Endpoint:
        now = time.monotonic()
        if self._card is not None and now - self._card[0] < CARD_TTL_S:
            return self._card[1]
        async with self._session().get(self.settings.url + CARD_PATH) as resp:
            if resp.status != 200:
                raise await error_for(resp, "The A2A agent")
            try:
                card = await resp.json(content_type=None)
            except ValueError as exc:
                raise CardError("the agent card is not JSON") from exc
        endpoint = endpoint_of(card)
        self._card = (now, endpoint)
        return endpoint

    async def run(self, turn: TurnInput) -> AsyncIterator[RunEvent]:
        context_id, task_id = split_thread(turn.expert_thread_id)
        yield Started(run_id=turn.turn_id, thread_id=turn.expert_thread_id or "")
        try:
            endpoint = await self._endpoint()
        except CardError as exc:
            yield Finished("error", f"The A2A agent cannot be used: {exc}.")
            return
        except (ExpertHttpError, aiohttp.ClientError, TimeoutError) as exc:
            yield Finished("error", user_error(exc, "The A2A agent", self.settings.url))
            return
        metadata = {
            "senderId": turn.sender_id,
            "senderName": turn.sender_name,
            "chatId": turn.chat_id,
            "chatType": turn.chat_type,
            "language": turn.variables.get("sys.language"),
            "timezone": turn.variables.get("sys.timezone"),
        }
        attachments = list(turn.attachments) if self.settings.attachments else []
        msg = message(
            turn.text,
            attachments,
            context_id=context_id,
            task_id=task_id,
            metadata={k: v for k, v in metadata.items() if v},
        )
        stream = A2AStream(context_id=context_id)
        try:
            async for event in self._exchange(turn, endpoint, msg, stream):
                yield event
        except (ExpertHttpError, aiohttp.ClientError, TimeoutError) as exc:
            log.warning("a2a exchange failed", error=str(exc))
            self._tasks.pop(turn.turn_id, None)
            yield Finished("error", user_error(exc, "The A2A agent", self.settings.url))
            return
        except asyncio.CancelledError:
            raise  # Stop: cancel() still needs the task's id
        except BaseException:
            self._tasks.pop(turn.turn_id, None)
            raise
        self._tasks.pop(turn.turn_id, None)
        name = endpoint.name or "The agent"
        waiting = stream.state == WAITING and stream.task_id
        thread = f"{stream.context_id}|{stream.task_id}" if waiting else stream.context_id
        if thread and thread != turn.expert_thread_id:
            yield Started(run_id=turn.turn_id, thread_id=thread)
        if waiting:
            yield Clarification(question=stream.status_text or f"{name} needs more from you.")
            yield Finished("success")
        elif stream.state == AUTH:
            said = f": {stream.status_text}" if stream.status_text else "."
            yield Finished("error", f"{name} needs you to sign in first{said}")
        elif stream.state in FAILED:
            said = f": {stream.status_text}" if stream.status_text else "."
            yield Finished("error", f"{name} could not do it{said}")
        elif stream.state == CANCELED:
            yield Finished("error", f"{name} cancelled the task.")
        elif stream.state == DONE:
            yield Finished("success")
        else:
            yield Finished("error", f"{name} stopped answering before the task ended.")

    async def _exchange(
        self, turn: TurnInput, endpoint: Endpoint, msg: dict[str, Any], stream: A2AStream
    ) -> AsyncIterator[RunEvent]:
        """Send the message (retrying what never reached the agent) and read the answer."""
        delay = 0.5
        for attempt in range(self.settings.connect_retries + 1):
            try:
                async for result in self._send(endpoint, msg):
                    for event in stream.feed(result):
                        yield event
                    if stream.task_id and turn.turn_id not in self._tasks:
                        self._tasks[turn.turn_id] = (endpoint, stream.task_id)
                return
            except ExpertHttpError as exc:
                if not exc.retryable or stream.task_id or attempt == self.settings.connect_retries:
                    raise
            except aiohttp.ClientConnectorError:
                if attempt == self.settings.connect_retries:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, 8)

    async def _send(self, endpoint: Endpoint, msg: dict[str, Any]) -> AsyncIterator[Any]:
        """The responses to one message: a stream's events, or the one answer."""
        stream = endpoint.streaming
        if endpoint.binding == "JSONRPC":
            method = "SendStreamingMessage" if stream else "SendMessage"
            body: dict[str, Any] = {
                "jsonrpc": "2.0",
                "id": uuid.uuid4().hex,
                "method": method,
                "params": {"message": msg},
            }
            url = endpoint.url
        else:
            body = {"message": msg}
            url = endpoint.url + ("/message:stream" if stream else "/message:send")
        async with self._session().post(url, json=body) as resp:
            if resp.status != 200:
                raise await error_for(resp, "The A2A agent")
            if resp.content_type != "text/event-stream":
                yield _result(await resp.json(content_type=None), endpoint)
                return
            events = read_sse(resp, comments=True)
            while True:
                try:
                    async with asyncio.timeout(self.settings.idle_timeout_seconds):
                        sse = await anext(events)
                except StopAsyncIteration:
                    return
                except TimeoutError:
                    resp.close()
                    raise ExpertHttpError(
                        f"The A2A agent sent nothing for {self.settings.idle_timeout_seconds:g} s."
                    ) from None
                if sse.event == COMMENT or not sse.data.strip():
                    continue
                try:
                    data = json.loads(sse.data)
                except ValueError:
                    log.warning("a2a event that is not JSON left out")
                    continue
                yield _result(data, endpoint)

    async def resume(
        self, turn: TurnInput, decision: Decision, interrupt: dict[str, Any]
    ) -> AsyncIterator[RunEvent]:
        yield Finished("error", "This agent does not ask for confirmations.")

    async def cancel(self, turn: TurnInput) -> None:
        found = self._tasks.pop(turn.turn_id, None)
        if found is None:
            return
        endpoint, task_id = found
        if endpoint.binding == "JSONRPC":
            body: dict[str, Any] = {
                "jsonrpc": "2.0",
                "id": uuid.uuid4().hex,
                "method": "CancelTask",
                "params": {"id": task_id},
            }
            request = self._session().post(endpoint.url, json=body)
        else:
            request = self._session().post(f"{endpoint.url}/tasks/{task_id}:cancel", json={})
        try:
            async with request as resp:
                text = await resp.text()
                if resp.status >= 400 or '"error"' in text:
                    log.warning("a2a cancel refused", status=resp.status)
        except aiohttp.ClientError as exc:
            log.warning("a2a cancel failed", error=str(exc))

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()


def _result(data: Any, endpoint: Endpoint) -> Any:
    """A JSON-RPC response's result (its error raised); an HTTP+JSON body as it is."""
    if endpoint.binding != "JSONRPC":
        return data
    if not isinstance(data, dict):
        raise ExpertHttpError("The A2A agent answered something that is not JSON-RPC.")
    error = data.get("error")
    if isinstance(error, dict):
        raise ExpertHttpError(
            f"The A2A agent refused the message: {error.get('message') or 'an error'} "
            f"(code {error.get('code')})."
        )
    return data.get("result")
