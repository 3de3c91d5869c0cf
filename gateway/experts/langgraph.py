"""Any LangGraph Agent Server (LangGraph Platform, a self-hosted Agent Server, ``langgraph
dev``): a session is one thread, a turn one run streamed over SSE (``langgraph_stream``).

The API, as langgraph-api serves it (``api/runs.py``, ``api/threads.py``, ``models/run.py``):
``POST /threads/{t}/runs/stream`` with ``if_not_exists: "create"`` makes the thread on the first
turn; ``stream_resumable`` and ``on_disconnect: "continue"`` keep the run going when the stream
drops, and ``GET /threads/{t}/runs/{run}/stream`` with ``Last-Event-ID`` rejoins it; Stop is
``POST /threads/{t}/runs/{run}/cancel``; an interrupted run goes on with ``command.resume``,
keyed by interrupt id; ``GET /threads/{t}`` says whether the thread waits on an interrupt
(``status: "interrupted"``, ``interrupts``); ``GET /threads/{t}/state`` holds its values.
``context`` and ``config.configurable`` may not both be sent (models/run.py).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Literal

import aiohttp
import structlog
from pydantic import Field, SecretStr, field_validator

from gateway.config.bases import ExpertBase, VariableDecl
from gateway.config.model import http_url
from gateway.events import (
    Decision,
    Finished,
    Interrupt,
    RunEvent,
    Started,
    VariablesEvent,
)
from gateway.experts.base import Expert, ExpertContext, TurnInput
from gateway.experts.http import ExpertHttpError, error_for, unreachable, user_error
from gateway.experts.langgraph_stream import (
    LangGraphStream,
    decision_for,
    question_of,
    review_actions,
    review_kind,
    review_prompt,
    typed_answer,
)
from gateway.experts.probes import probe_langgraph
from gateway.experts.sse import COMMENT, SseEvent, read_sse
from gateway.experts.xpert_input import changed_state, with_history

log = structlog.get_logger("gateway.experts.langgraph")
BACKEND = "The LangGraph agent"


class LangGraphExpertSettings(ExpertBase):
    """A graph on a LangGraph Agent Server (threads, runs streamed over SSE, interrupts)."""

    kind: Literal["langgraph"]
    base_url: str = Field(description="The Agent Server, e.g. http://127.0.0.1:2024")
    assistant_id: str | None = Field(
        None, description="A graph id or an assistant id; defaults to the expert id"
    )
    api_key: SecretStr | None = Field(None, description="Sent as x-api-key when set")
    context_as: Literal["context", "configurable"] = Field(
        "context",
        description="How the turn's context (sender, chat, language, timezone) reaches the "
        "run: as the run's context (LangGraph >= 0.6) or as config.configurable",
    )
    show_nodes: bool = Field(True, description="Each graph node that ran, as a step")
    vision: bool = Field(False, description="Pass pictures as LangChain image content blocks")
    files: bool = Field(False, description="Pass files as LangChain file content blocks")
    connect_retries: int = Field(3, ge=0, le=10, description="Retries before the run started")
    idle_timeout_seconds: float = Field(
        120, gt=0, description="A stream silent this long ends the turn with an error"
    )
    variables: list[VariableDecl] = Field(default_factory=list)

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str) -> str:
        return http_url(value)


@dataclass
class _Run:
    thread_id: str
    stream: LangGraphStream
    last_id: str | None = None
    # The newest event id read ("<ms>-<seq>") and the events read under it. langgraph-api
    # gives distinct events the same id, and a rejoined stream may hand over again one it
    # already sent: an event at or before the newest id is taken only when it is new.
    newest: tuple[int, int] | None = None
    at_newest: set[int] = field(default_factory=set)

    def fresh(self, sse: SseEvent) -> bool:
        """Whether ``sse`` was not read before (and note it)."""
        try:
            ms, _, seq = (sse.id or "").partition("-")
            key = (int(ms), int(seq or 0))
        except ValueError:
            return True  # no id to tell by
        digest = hash((sse.event, sse.data))
        if self.newest is not None and (
            key < self.newest or (key == self.newest and digest in self.at_newest)
        ):
            return False
        if key != self.newest:
            self.newest, self.at_newest = key, set()
        self.at_newest.add(digest)
        return True


class LangGraphExpert(Expert):
    kind = "langgraph"
    settings_model = LangGraphExpertSettings
    declared_variables_only = True  # the graph's state takes only the keys it declares
    probe = classmethod(probe_langgraph)  # check --probe (gateway/experts/probes.py)

    def __init__(self, *, settings: LangGraphExpertSettings) -> None:
        self.settings = settings
        self.accepts_images = settings.vision
        self.accepts_files = settings.files
        self._http: aiohttp.ClientSession | None = None
        self._runs: dict[str, _Run] = {}  # turn id -> its run

    @classmethod
    def create(cls, *, settings: ExpertBase, context: ExpertContext) -> LangGraphExpert:
        assert isinstance(settings, LangGraphExpertSettings)
        return cls(settings=settings)

    @property
    def assistant_id(self) -> str:
        return self.settings.assistant_id or self.settings.id

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            headers = {}
            key = self.settings.api_key.get_secret_value() if self.settings.api_key else ""
            if key:  # "${LANGGRAPH_API_KEY:-}" left empty: a local server takes none
                headers["x-api-key"] = key
            self._http = aiohttp.ClientSession(
                headers=headers, timeout=aiohttp.ClientTimeout(total=None, sock_connect=10)
            )
        return self._http

    def _url(self, path: str) -> str:
        return f"{self.settings.base_url}{path}"

    # --- the turn's input --------------------------------------------------------------
    def _content(self, turn: TurnInput) -> Any:
        """The user's message: text, and LangChain's standard content blocks for pictures and
        files (langchain-core ``messages/content.py``: ``base64`` with ``mime_type``)."""
        text = with_history(turn)
        blocks: list[dict[str, Any]] = []
        for a in turn.attachments:
            url, kind = str(a.get("url") or ""), a.get("kind")
            if not url.startswith("data:") or ";base64," not in url:
                continue
            if (kind == "image" and self.settings.vision) or (
                kind == "file" and self.settings.files
            ):
                mime, data = url[5:].split(";base64,", 1)
                block: dict[str, Any] = {
                    "type": "image" if kind == "image" else "file",
                    "base64": data,
                    "mime_type": str(a.get("mime") or mime),
                }
                if kind == "file" and a.get("name"):
                    block["extras"] = {"filename": str(a["name"])}
                blocks.append(block)
        return [{"type": "text", "text": text}, *blocks] if blocks else text

    def _context(self, turn: TurnInput) -> dict[str, Any]:
        v = turn.variables
        context = {
            "integration_id": turn.integration_id,
            "session_id": turn.session_id,
            "chat_id": turn.chat_id,
            "chat_type": turn.chat_type,
            "sender_id": turn.sender_id,
            "sender_name": turn.sender_name,
            "language": v.get("sys.language"),
            "timezone": v.get("sys.timezone"),
        }
        return {k: val for k, val in context.items() if val}

    def _body(self, turn: TurnInput, **run: Any) -> dict[str, Any]:
        body: dict[str, Any] = {
            "assistant_id": self.assistant_id,
            "stream_mode": ["messages-tuple", "updates"],
            "stream_resumable": True,
            "on_disconnect": "continue",
            "if_not_exists": "create",
            "metadata": {"gateway_turn_id": turn.turn_id, "gateway_session_id": turn.session_id},
            **run,
        }
        if self.settings.context_as == "context":
            body["context"] = self._context(turn)
        else:
            body["config"] = {"configurable": self._context(turn)}
        return body

    # --- runs ---------------------------------------------------------------------------
    async def run(self, turn: TurnInput) -> AsyncIterator[RunEvent]:
        thread_id = turn.expert_thread_id or str(uuid.uuid4())
        try:
            waiting = await self._waiting(turn.expert_thread_id)
        except (ExpertHttpError, aiohttp.ClientError, TimeoutError) as exc:
            yield Started(run_id=turn.turn_id, thread_id=thread_id)
            yield Finished("error", user_error(exc, BACKEND, self.settings.base_url))
            return
        holds: dict[str, Any] = {}
        if waiting:
            # The thread waits on a question the card showed: this message answers it. A
            # review the user typed past instead of clicking is rejected, carrying the text.
            resume = {str(i["id"]): typed_answer(i.get("value"), turn.text) for i in waiting}
            body = self._body(turn, command={"resume": resume})
        else:
            state, holds = changed_state(turn, None)
            message = {"role": "user", "content": self._content(turn)}
            body = self._body(turn, input={"messages": [message], **state})
        async for event in self._turn(turn, thread_id, body, holds):
            yield event

    async def resume(
        self, turn: TurnInput, decision: Decision, interrupt: dict[str, Any]
    ) -> AsyncIterator[RunEvent]:
        thread_id = turn.expert_thread_id
        reviews = interrupt.get("reviews")
        if not thread_id or not isinstance(reviews, list):
            yield Finished("error", "The conversation this confirmation belongs to is gone.")
            return
        resume = {
            str(r["id"]): decision_for(str(r["kind"]), int(r["count"]), decision)
            for r in reviews
            if isinstance(r, dict)
        }
        body = self._body(turn, command={"resume": resume})
        async for event in self._turn(turn, thread_id, body, {}):
            yield event

    async def _waiting(self, thread_id: str | None) -> list[dict[str, Any]]:
        """The interrupts the thread waits on (``GET /threads/{t}``), none for a new thread."""
        if not thread_id:
            return []
        async with self._session().get(self._url(f"/threads/{thread_id}")) as resp:
            if resp.status == 404:
                return []  # gone (a restarted dev server): the run makes it again
            if not 200 <= resp.status < 300:
                raise await error_for(resp, BACKEND)
            data = await resp.json()
        if not isinstance(data, dict) or data.get("status") != "interrupted":
            return []
        found = data.get("interrupts")
        pending = [i for group in found.values() for i in group] if isinstance(found, dict) else []
        return [i for i in pending if isinstance(i, dict) and i.get("id")]

    async def _turn(
        self, turn: TurnInput, thread_id: str, body: dict[str, Any], holds: dict[str, Any]
    ) -> AsyncIterator[RunEvent]:
        yield Started(run_id=turn.turn_id, thread_id=thread_id)
        stream = LangGraphStream(show_nodes=self.settings.show_nodes)
        run = _Run(thread_id, stream)
        self._runs[turn.turn_id] = run
        try:
            async for event in self._follow(run, body):
                if holds and stream.run_id:
                    yield VariablesEvent(values=holds, mode="sent")
                    holds = {}
                yield event
        except (ExpertHttpError, aiohttp.ClientError, TimeoutError) as exc:
            log.warning("langgraph run failed", error=str(exc), thread_id=thread_id)
            self._runs.pop(turn.turn_id, None)
            yield Finished("error", user_error(exc, BACKEND, self.settings.base_url))
            return
        except asyncio.CancelledError:
            raise  # Stop: cancel() still needs the run's ids
        except BaseException:
            self._runs.pop(turn.turn_id, None)
            raise
        self._runs.pop(turn.turn_id, None)
        if holds and stream.run_id:
            yield VariablesEvent(values=holds, mode="sent")
        if turn.declared_variables and stream.run_id:
            values = await self._values(thread_id)
            declared = {n: values[n] for n in turn.declared_variables if n in values}
            if declared:
                yield VariablesEvent(values=declared, mode="backend")
        if stream.error:
            yield Finished("error", f"{BACKEND} failed: {stream.error}")
            return
        reviews = [i for i in stream.interrupts if review_kind(i.get("value")) and i.get("id")]
        if reviews and len(reviews) == len(stream.interrupts):
            data = {
                "reviews": [
                    {
                        "id": i["id"],
                        "kind": review_kind(i["value"]),
                        "count": len(review_actions(i["value"])),
                    }
                    for i in reviews
                ]
            }
            yield Interrupt(review_prompt([i["value"] for i in reviews]), data)
            yield Finished("interrupted")
            return
        if stream.interrupts:  # a question: the chat's next message answers it
            yield question_of(stream.interrupts[0].get("value"))
        yield Finished("success")

    async def _follow(self, run: _Run, body: dict[str, Any]) -> AsyncIterator[RunEvent]:
        """Start the run, then follow it; a dropped stream rejoins after the last event id."""
        s, delay, failures = self.settings, 0.5, 0
        while True:
            try:
                async for event in self._read(run, body):
                    yield event
                return
            except ExpertHttpError as exc:
                if not exc.retryable or failures == s.connect_retries:
                    raise
            except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError) as exc:
                sent = not isinstance(exc, aiohttp.ClientConnectorError)
                if failures == s.connect_retries or (sent and run.stream.run_id is None):
                    # A run that may have started but whose id we never saw cannot be
                    # rejoined, and starting it again could run it twice.
                    if not sent:
                        raise unreachable(BACKEND, s.base_url, exc) from exc
                    raise ExpertHttpError(
                        f"{BACKEND} connection was lost ({type(exc).__name__})."
                    ) from exc
                log.warning("langgraph stream dropped; rejoining", run_id=run.stream.run_id)
            failures += 1
            await asyncio.sleep(delay)
            delay = min(delay * 2, 8)

    async def _read(self, run: _Run, body: dict[str, Any]) -> AsyncIterator[RunEvent]:
        s, stream = self.settings, run.stream
        if stream.run_id is not None:
            url = self._url(f"/threads/{run.thread_id}/runs/{stream.run_id}/stream")
            headers = {"Last-Event-ID": run.last_id} if run.last_id else {}
            request = self._session().get(url, headers=headers)
        else:
            request = self._session().post(
                self._url(f"/threads/{run.thread_id}/runs/stream"), json=body
            )
        async with request as resp:
            if not 200 <= resp.status < 300:
                raise await error_for(resp, BACKEND)
            events = read_sse(resp, comments=True)
            while True:
                try:
                    async with asyncio.timeout(s.idle_timeout_seconds):
                        sse = await anext(events)
                except StopAsyncIteration:
                    return
                except TimeoutError:
                    resp.close()
                    raise ExpertHttpError(
                        f"{BACKEND} sent nothing for {s.idle_timeout_seconds:g} s."
                    ) from None
                if sse.event == COMMENT or not run.fresh(sse):
                    continue
                run.last_id = sse.id or run.last_id
                for event in stream.feed(sse):
                    yield event

    async def _values(self, thread_id: str) -> dict[str, Any]:
        """The thread's values now; a failed read costs only the variables' write-back."""
        try:
            async with self._session().get(self._url(f"/threads/{thread_id}/state")) as resp:
                if not 200 <= resp.status < 300:
                    raise await error_for(resp, BACKEND)
                data = await resp.json()
        except (ExpertHttpError, aiohttp.ClientError, TimeoutError, ValueError) as exc:
            log.warning("langgraph state read failed", error=str(exc), thread_id=thread_id)
            return {}
        values = data.get("values") if isinstance(data, dict) else None
        return values if isinstance(values, dict) else {}

    async def cancel(self, turn: TurnInput) -> None:
        run = self._runs.pop(turn.turn_id, None)
        if run is None or run.stream.run_id is None:
            return
        url = self._url(f"/threads/{run.thread_id}/runs/{run.stream.run_id}/cancel")
        try:
            async with self._session().post(url, params={"action": "interrupt"}) as resp:
                if resp.status >= 400:
                    log.warning("langgraph cancel refused", status=resp.status)
        except aiohttp.ClientError as exc:
            log.warning("langgraph cancel failed", error=str(exc))

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
