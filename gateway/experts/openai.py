"""Any OpenAI-compatible ``/chat/completions`` endpoint, streamed; the gateway keeps the history."""

from __future__ import annotations

import asyncio
import base64
import binascii
import json
import re
from collections.abc import AsyncIterator
from typing import Any, Literal

import aiohttp
import structlog
from pydantic import Field, SecretStr, field_validator

from gateway.config.bases import ExpertBase, VariableDecl
from gateway.config.model import http_url
from gateway.events import Decision, Finished, RunEvent, Started, StepEvent, TextDelta, UsageEvent
from gateway.experts.base import Expert, ExpertContext, TurnInput
from gateway.experts.http import ExpertHttpError, error_for, unreachable
from gateway.experts.probes import probe_openai
from gateway.experts.sse import read_sse
from sessions import HistoryStore

log = structlog.get_logger("gateway.experts.openai")
PDF = "application/pdf"
MAX_TEXT_CHARS = 100_000  # of one text file, inlined into the prompt
TEXT_TYPES = frozenset({"application/json", "application/xml", "application/x-yaml"})


_PLACEHOLDER = re.compile(r"\{\{\s*([A-Za-z_][\w.]*)\s*\}\}")


def render_template(template: str, variables: dict[str, Any]) -> str:
    """Fill ``{{name}}`` placeholders of the system prompt; an unknown name becomes empty text."""
    return _PLACEHOLDER.sub(lambda m: str(variables.get(m.group(1), "")), template)


def is_text(mime: str) -> bool:
    return mime.startswith("text/") or mime in TEXT_TYPES


def file_part(attachment: dict[str, Any]) -> dict[str, Any] | None:
    """A fetched file as a content part: a PDF as a ``file`` part (``file_data`` a data URL,
    with its ``filename``; Chat Completions takes only PDFs that way: developers.openai.com/api/
    docs/guides/file-inputs), a text file as text under its name (that guide's advice for
    other files)."""
    url, mime = str(attachment["url"]), str(attachment.get("mime") or "")
    name = str(attachment.get("name") or "file")
    if mime == PDF:
        return {"type": "file", "file": {"filename": name, "file_data": url}}
    if not is_text(mime):
        return None
    try:
        text = base64.b64decode(url.partition(",")[2]).decode("utf-8", errors="replace")
    except binascii.Error:
        return None
    if len(text) > MAX_TEXT_CHARS:
        text = text[:MAX_TEXT_CHARS] + "\n[… cut off]"
    return {"type": "text", "text": f"File {name}:\n{text}"}


class OpenAIExpertSettings(ExpertBase):
    """Any OpenAI-compatible /chat/completions endpoint; the gateway keeps the history."""

    kind: Literal["openai"]
    base_url: str = Field(description="e.g. https://api.openai.com/v1 or http://127.0.0.1:11434/v1")
    api_key: SecretStr | None = None
    model: str
    system_prompt: str = Field(
        "You are a helpful assistant. Reply in {{sys.language}}. Today is {{sys.date}}.",
        description="Template; {{sys.*}}, {{memory.*}} and {{var.*}} are filled in",
    )
    temperature: float | None = Field(None, ge=0, le=2)
    max_history_messages: int = Field(20, ge=0, le=1000)
    max_history_chars: int = Field(24_000, ge=0)
    vision: bool = Field(False, description="Pass image attachments to the model")
    files: bool = Field(
        False,
        description="Pass file attachments to the model: PDFs as file content parts (Chat "
        "Completions takes PDF only), text files (text/*, JSON) as text; others are refused "
        "with a note on the card",
    )
    timeout_seconds: float = Field(120, gt=0)
    retries: int = Field(2, ge=0, le=10, description="Retries of 429 / 5xx / connect errors")
    variables: list[VariableDecl] = Field(default_factory=list)

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str) -> str:
        return http_url(value)


def _context(turn: TurnInput) -> list[dict[str, Any]]:
    """Recent group messages the bot saw but was not asked about, as a system note."""
    if not turn.group_history:
        return []
    lines = "\n".join(f"- {m['name']}: {m['text']}" for m in turn.group_history)
    return [{"role": "system", "content": f"Recent messages in this group chat:\n{lines}"}]


class OpenAIExpert(Expert):
    kind = "openai"
    settings_model = OpenAIExpertSettings
    bundle_options = frozenset({"model"})  # a route may pick the model; it calls no tools

    def __init__(self, *, settings: OpenAIExpertSettings, history: HistoryStore) -> None:
        self.settings = settings
        self.accepts_images = settings.vision
        self.accepts_files = settings.files
        self.history = history
        self._http: aiohttp.ClientSession | None = None

    @classmethod
    def create(cls, *, settings: ExpertBase, context: ExpertContext) -> OpenAIExpert:
        assert isinstance(settings, OpenAIExpertSettings)
        if context.history is None:
            raise ValueError("the openai expert needs a history store")
        return cls(settings=settings, history=context.history)

    probe = classmethod(probe_openai)  # check --probe (gateway/experts/probes.py)

    def _session(self) -> aiohttp.ClientSession:
        if self._http is None or self._http.closed:
            headers = {"Content-Type": "application/json"}
            if self.settings.api_key is not None:
                headers["Authorization"] = f"Bearer {self.settings.api_key.get_secret_value()}"
            self._http = aiohttp.ClientSession(
                headers=headers,
                timeout=aiohttp.ClientTimeout(
                    total=None, sock_connect=10, sock_read=self.settings.timeout_seconds
                ),
            )
        return self._http

    def refuses_file(self, mime: str) -> str | None:
        if mime == PDF or is_text(mime):
            return None
        return "this expert reads only PDF and text files"

    def _user_content(self, turn: TurnInput) -> Any:
        fetched = [a for a in turn.attachments if str(a.get("url") or "").startswith("data:")]
        images = [a for a in fetched if a.get("kind") == "image"] if self.settings.vision else []
        files = [a for a in fetched if a.get("kind") == "file"] if self.settings.files else []
        if not (images or files):
            return turn.text
        parts: list[dict[str, Any]] = [{"type": "text", "text": turn.text}]
        parts += [{"type": "image_url", "image_url": {"url": a["url"]}} for a in images]
        parts += [part for a in files if (part := file_part(a)) is not None]
        return parts

    async def run(self, turn: TurnInput) -> AsyncIterator[RunEvent]:
        yield Started(run_id=turn.turn_id, thread_id=turn.session_id)
        s = self.settings
        system = render_template(s.system_prompt, turn.variables)
        past = await self.history.load(turn.session_id)
        user = {"role": "user", "content": self._user_content(turn)}
        body: dict[str, Any] = {
            "model": s.model,
            "stream": True,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "system", "content": system}, *past, *_context(turn), user],
        }
        if s.temperature is not None:
            body["temperature"] = s.temperature
        yield StepEvent("model", f"Asking {s.model}", "running")
        answer: list[str] = []
        try:
            async for event in self._stream(body):
                if isinstance(event, TextDelta):
                    answer.append(event.text)
                yield event
        except ExpertHttpError as exc:
            log.error("openai expert failed", error=str(exc), model=s.model, url=s.base_url)
            yield StepEvent("model", f"Asking {s.model}", "failed")
            yield Finished("error", str(exc))
            return
        yield StepEvent("model", f"Asking {s.model}", "done")
        senders = list(turn.senders or (turn.sender_id,))
        await self.history.append(
            turn.session_id,
            [
                # Whose words these are, so a sender's erasure finds them (issue 36); the
                # model never sees the key (HistoryStore.load leaves it out).
                {"role": "user", "content": turn.text, "senders": senders},
                {"role": "assistant", "content": "".join(answer), "senders": senders},
            ],
            max_messages=s.max_history_messages,
            max_chars=s.max_history_chars,
        )
        yield Finished("success")

    async def _stream(self, body: dict[str, Any]) -> AsyncIterator[RunEvent]:
        url = f"{self.settings.base_url}/chat/completions"
        delay = 0.5
        sent = False  # retry only before the first token: a retry after it would double text
        for attempt in range(self.settings.retries + 1):
            try:
                async with self._session().post(url, json=body) as resp:
                    if resp.status != 200:
                        raise await error_for(resp, "The model")
                    async for sse in read_sse(resp):
                        if sse.data.strip() == "[DONE]":
                            return
                        chunk = json.loads(sse.data)
                        if chunk.get("error"):
                            message = chunk["error"].get("message", "unknown error")
                            raise ExpertHttpError(f"The model reported an error: {message}")
                        for choice in chunk.get("choices") or []:
                            text = (choice.get("delta") or {}).get("content")
                            if text:
                                sent = True
                                yield TextDelta(text)
                        usage = chunk.get("usage")
                        if usage:
                            yield UsageEvent(
                                input_tokens=int(usage.get("prompt_tokens", 0)),
                                output_tokens=int(usage.get("completion_tokens", 0)),
                            )
                    return
            except ExpertHttpError as exc:
                if sent or not exc.retryable or attempt == self.settings.retries:
                    raise
                await asyncio.sleep(max(delay, exc.retry_after))
            except (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, TimeoutError) as exc:
                if sent or attempt == self.settings.retries:
                    raise unreachable("The model", url, exc) from exc
                await asyncio.sleep(delay)
            delay = min(delay * 2, 8)

    async def resume(
        self, turn: TurnInput, decision: Decision, interrupt: dict[str, Any]
    ) -> AsyncIterator[RunEvent]:
        yield Finished("error", "This expert does not ask for confirmations.")

    async def close(self) -> None:
        if self._http is not None:
            await self._http.close()
