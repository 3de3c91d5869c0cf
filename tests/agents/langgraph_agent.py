"""The graph the suite serves with ``langgraph dev`` (tests/support/langgraph_server.py): a real
LangChain agent (``langchain.agents.create_agent``) with the real ``HumanInTheLoopMiddleware``,
whose model is a small scripted chat model (no network, no weights). What it does is read from
markers in the user's last message:

- ``[refund]``: calls the ``refund`` tool, which the middleware holds for review: batched
  (``action_requests`` / ``review_configs``) in ``graph``, one call at a time (``type:
  tool_approval``) in ``per_call``; ``[void]`` calls ``void`` (approve or reject only).
- ``[ask]``: calls ``ask_order``, whose body is ``interrupt("What is your order number?")``: the
  chat's next message is its answer.
- ``[slow]``: streams 200 words, 50 ms apart (for Stop); ``[slow40]`` 40 of them.
- ``[whoami]``: answers with the run's context (sender, chat, language) as the run got it.
- ``[boom]``: the model raises (the run fails).
- anything else: ``You said: <text>`` (and ``(N images)`` for picture content blocks), streamed
  word by word.
After a tool ran, the model answers ``Done: <the tool's result>``. The last chunk of an answer
reports its tokens (``usage_metadata``: the words of the question and of the answer).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

from langchain.agents import create_agent
from langchain.agents.middleware import HumanInTheLoopMiddleware
from langchain_core.callbacks import (
    AsyncCallbackManagerForLLMRun,
    CallbackManagerForLLMRun,
)
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from langchain_core.tools import tool
from langgraph.config import get_config
from langgraph.types import interrupt

SLOW = re.compile(r"\[slow(\d*)\]")


@tool
def refund(order: str, amount: int) -> str:
    """Refund an order."""
    return f"refunded {amount} on {order}"


@tool
def void(order: str) -> str:
    """Void an order."""
    return f"voided {order}"


@tool
def ask_order() -> str:
    """Ask the user for their order number."""
    answer = interrupt("What is your order number?")
    return f"order {answer} found"


def _text(message: BaseMessage) -> str:
    content = message.content
    if isinstance(content, str):
        return content
    return " ".join(
        str(block.get("text", "")) for block in content if isinstance(block, dict)
    ).strip()


def _images(message: BaseMessage) -> int:
    content = message.content
    if isinstance(content, str):
        return 0
    return sum(
        1 for b in content if isinstance(b, dict) and b.get("type") in ("image", "image_url")
    )


class ScriptedModel(BaseChatModel):
    """A chat model that answers by the markers above, token by token."""

    @property
    def _llm_type(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedModel:  # type: ignore[override]
        return self

    def _reply(self, messages: list[BaseMessage]) -> AIMessage:
        last = messages[-1]
        if isinstance(last, ToolMessage):
            return AIMessage(content=f"Done: {_text(last)}")
        text = _text(last)
        if "[boom]" in text:
            raise RuntimeError("the scripted model failed")
        if "[void]" in text:
            call = {"name": "void", "args": {"order": "A-7"}, "id": "call-void"}
            return AIMessage(content="", tool_calls=[call])
        if "[refund]" in text:
            call = {"name": "refund", "args": {"order": "A-7", "amount": 10}, "id": "call-1"}
            return AIMessage(content="", tool_calls=[call])
        if "[ask]" in text:
            return AIMessage(content="", tool_calls=[{"name": "ask_order", "args": {}, "id": "c2"}])
        if slow := SLOW.search(text):
            return AIMessage(content=" ".join(f"w{i}" for i in range(int(slow.group(1) or 200))))
        if "[whoami]" in text:
            context = get_config().get("configurable", {})
            keys = ("sender_id", "sender_name", "chat_id", "language", "timezone")
            return AIMessage(content="; ".join(f"{k}={context.get(k)}" for k in keys))
        images = _images(last)
        suffix = f" ({images} images)" if images else ""
        return AIMessage(content=f"You said: {text}{suffix}")

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        return ChatResult(generations=[ChatGeneration(message=self._reply(messages))])

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        raise NotImplementedError  # the server calls the model asynchronously

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        reply = self._reply(messages)
        if reply.tool_calls:
            chunk = AIMessageChunk(
                content="",
                tool_call_chunks=[
                    {"name": c["name"], "args": _json(c["args"]), "id": c["id"], "index": i}
                    for i, c in enumerate(reply.tool_calls)
                ],
            )
            yield ChatGenerationChunk(message=chunk)
            return
        slow = str(reply.content).startswith("w0 w1")
        words = str(reply.content).split(" ")
        for i, word in enumerate(words):
            if slow:
                await asyncio.sleep(0.05)
            token = word if i == 0 else " " + word
            usage = None
            if i == len(words) - 1:  # the last chunk reports the call's tokens, as providers do
                usage = {
                    "input_tokens": len(_text(messages[-1]).split()),
                    "output_tokens": len(words),
                    "total_tokens": len(_text(messages[-1]).split()) + len(words),
                }
            message = AIMessageChunk(content=token, usage_metadata=usage)  # type: ignore[arg-type]
            chunk = ChatGenerationChunk(message=message)
            if run_manager is not None:
                await run_manager.on_llm_new_token(token, chunk=chunk)
            yield chunk


def _json(value: Any) -> str:
    import json

    return json.dumps(value)


graph = create_agent(
    model=ScriptedModel(),
    tools=[refund, void, ask_order],
    middleware=[HumanInTheLoopMiddleware(interrupt_on={"refund": True})],
)
# The same agent, its reviews asked one tool call at a time.
per_call = create_agent(
    model=ScriptedModel(),
    tools=[refund, void, ask_order],
    middleware=[
        HumanInTheLoopMiddleware(
            interrupt_on={"void": {"allowed_decisions": ["approve", "reject"]}, "refund": True},
            interrupt_mode="per_call",
        )
    ],
)
