"""The MCP endpoint (``mcp.path``, default ``/mcp``) on the gateway's own port: the official
``mcp`` SDK's server (its lowlevel ``Server`` and the streamable HTTP transport of its
``StreamableHTTPSessionManager``, stateless with JSON answers) behind an aiohttp handler that
first authenticates the caller (a bearer token per client, compared in constant time: 401) and
bounds the body (413). Stateless, because any replica must answer any call: no MCP session
lives in one replica's memory (docs/mcp.md, "Why a bridge")."""

from __future__ import annotations

import asyncio
import hmac
import json
import secrets
import time
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import structlog
from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from gateway import __version__
from gateway.actions import bridge, tools
from gateway.actions.chats import (
    ActedFor,
    CallMetrics,
    CallRecord,
    Governor,
    ToolRefused,
    expert_sources,
)
from gateway.config.mcp import McpClient
from gateway.config.settings import Settings
from gateway.edge.adapter import Adapter
from gateway.edge.calls import BudgetExhausted, Priority, calls_as
from gateway.edge.chat_actions import (
    HISTORY,
    MEMBERS,
    SEND_FILE,
    SEND_MESSAGE,
    TOOLS,
    Unsupported,
    post_envelope,
)
from gateway.edge.platform_api import platform_refusal
from gateway.envelope import Chat
from gateway.errors import PlatformApiError
from sessions import STORE_FAILED, SessionRecords

if TYPE_CHECKING:
    # The SDK is imported when the server is made (a daemon without mcp.clients never pays
    # its 0.6 s of imports at start).
    import mcp_types as types
    from mcp.server.lowlevel.server import Server

log = structlog.get_logger("gateway.actions")


class ChatActionsServer:
    """Serves the tools of ``tools`` for the clients of ``mcp.clients``."""

    def __init__(
        self,
        *,
        settings: Callable[[], Settings],
        adapters: Mapping[str, Adapter],
        records: SessionRecords,
        governor: Governor,
        metrics: CallMetrics,
        clock: Callable[[], int],
    ) -> None:
        self.settings = settings
        self.adapters = adapters
        self.records = records
        self.governor = governor
        self.metrics = metrics
        self.clock = clock
        from mcp.server.lowlevel.server import Server
        from mcp.server.streamable_http_manager import StreamableHTTPSessionManager

        self.server: Server[Any] = Server(
            "xpert-gateway",
            version=__version__,
            instructions="Chat actions: send into, read and list the chats your agent has "
            "sessions in, on each chat platform the gateway connects and the console.",
            on_list_tools=self._list_tools,
            on_call_tool=self._call_tool,
        )
        mcp = settings().mcp
        self.manager = StreamableHTTPSessionManager(
            self.server,
            stateless=True,
            json_response=True,
            max_request_body_size=mcp.max_request_bytes,
        )

    # --- aiohttp --------------------------------------------------------------------------
    def setup(self, app: web.Application) -> None:
        app.router.add_route("*", self.settings().mcp.path, self.handle)
        app.cleanup_ctx.append(self._running)

    async def _running(self, _app: web.Application) -> AsyncIterator[None]:
        """The SDK's task group lives in a task of its own (anyio scopes are left in the task
        that entered them), from the app's start to its cleanup."""
        started, stop = asyncio.Event(), asyncio.Event()

        async def run() -> None:
            async with self.manager.run():
                started.set()
                await stop.wait()

        task = asyncio.create_task(run(), name="mcp-manager")
        waiter = asyncio.create_task(started.wait())
        await asyncio.wait([task, waiter], return_when=asyncio.FIRST_COMPLETED)
        waiter.cancel()
        if task.done():
            task.result()  # raises what stopped it
        try:
            yield
        finally:
            stop.set()
            await task

    def _client(self, request: web.Request) -> McpClient | None:
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not token or not token.isascii():
            return None
        found = None
        given = token.strip().encode()
        for client in self.settings().mcp.clients:  # every token compared: no early exit
            if hmac.compare_digest(given, client.token.get_secret_value().encode()):
                found = client
        return found

    async def handle(self, request: web.Request) -> web.StreamResponse:
        mcp = self.settings().mcp
        if not mcp.enabled:
            raise web.HTTPNotFound()
        client = self._client(request)
        if client is None:
            log.info("mcp request refused", reason="no or wrong token", status=401)
            return web.json_response(
                {"error": "unauthorized"}, status=401, headers={"WWW-Authenticate": "Bearer"}
            )
        if (request.content_length or 0) > mcp.max_request_bytes:
            log.info("mcp request refused", client=client.id, reason="body too large", status=413)
            return web.json_response({"error": "request too large"}, status=413)
        body = bytearray()
        try:
            async for chunk in request.content.iter_chunked(64 * 1024):
                body += chunk
                if len(body) > mcp.max_request_bytes:
                    log.info("mcp request refused", client=client.id, reason="body too large")
                    return web.json_response({"error": "request too large"}, status=413)
        except (HttpProcessingError, web.RequestPayloadError, ConnectionError) as exc:
            log.info("mcp request refused", client=client.id, reason=type(exc).__name__)
            return web.json_response({"error": "body unreadable"}, status=400)
        return await bridge.serve(
            self.manager.handle_request, request, bytes(body), {"client": client}
        )

    # --- MCP ------------------------------------------------------------------------------
    async def _list_tools(
        self, _ctx: Any, _params: types.PaginatedRequestParams | None
    ) -> types.ListToolsResult:
        import mcp_types as types

        listed = [
            types.Tool(
                name=name, description=tools.SCHEMAS[name][0], input_schema=tools.input_schema(name)
            )
            for name in TOOLS
        ]
        return types.ListToolsResult(tools=listed)

    async def _call_tool(
        self, ctx: Any, params: types.CallToolRequestParams
    ) -> types.CallToolResult:
        import mcp_types as types

        client = getattr(getattr(ctx.request, "state", None), "client", None)
        if not isinstance(client, McpClient):  # the handler always sets it
            return _error("unauthenticated")
        args = dict(params.arguments or {})
        try:
            answer = await self.call(client, params.name, args)
        except ToolRefused as exc:
            return _error(exc.reason)
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=_dumps(answer))], structured_content=answer
        )

    async def call(self, client: McpClient, tool: str, args: dict[str, Any]) -> dict[str, Any]:
        """One tool call, governed: the chat check, the client's rate, the platform budget at
        a button answer's priority, one audit row and one count however it ends."""
        settings, started, now = self.settings(), time.monotonic(), self.clock()
        integration_id = str(args.get("integrationId") or "")[:64]
        chat_id = str(args.get("chatId") or "")[:256]
        record = CallRecord(
            client.id, tool if tool in TOOLS else "unknown", integration_id, chat_id, now
        )
        try:
            if tool not in TOOLS:
                raise ToolRefused(f"no tool {tool[:64]!r}")
            await self.governor.count(client, settings.mcp.calls_per_minute, now)
            adapter = self.adapters.get(integration_id)
            if adapter is None or not integration_id or not chat_id:
                raise ToolRefused("integrationId and chatId must name a chat of a running bot")
            acted = await self.governor.acted_for(
                client, settings.mcp, integration_id, chat_id, now
            )
            record.session_id = acted.session_id
            if tool not in adapter.chat_tools():
                raise ToolRefused(
                    f"{tool} is not offered on {adapter.settings.platform}", "unsupported"
                )
            with calls_as(Priority.CLICK, chat=chat_id):
                answer, record.bytes = await self._run(tool, adapter, acted, args, settings)
            record.outcome = "ok"
            return {**answer, "sessionId": acted.session_id}
        except ToolRefused as exc:
            record.outcome, record.reason = exc.outcome, exc.reason
            raise
        except Unsupported as exc:
            record.outcome, record.reason = "unsupported", str(exc)
            raise ToolRefused(str(exc), "unsupported") from None
        except BudgetExhausted as exc:
            record.outcome, record.reason = "budget", str(exc)
            raise ToolRefused(f"the platform budget refused it: {exc.reason}", "budget") from None
        except PlatformApiError as exc:
            record.outcome, record.reason = "platform", str(exc)
            log.warning(
                "mcp call failed", client=client.id, tool=tool, **(platform_refusal(exc) or {})
            )
            raise ToolRefused(f"the platform refused it: {exc}", "platform") from None
        except STORE_FAILED as exc:  # Redis could not serve the checks: one line, no traceback
            record.outcome, record.reason = "error", f"store: {type(exc).__name__}"
            log.warning("mcp call failed", client=client.id, tool=tool, error=str(exc)[:200])
            raise ToolRefused("the gateway's store is unavailable: try again", "error") from None
        except Exception as exc:
            record.outcome, record.reason = "error", type(exc).__name__
            log.exception("mcp call failed", client=client.id, tool=tool)
            raise ToolRefused("the gateway could not do it (logged)", "error") from None
        finally:
            seconds = time.monotonic() - started
            self.metrics.observe(record, seconds)
            await self.governor.audit(record, seconds * 1000)
            log.info("mcp call", client=client.id, tool=tool, outcome=record.outcome,
                     integration_id=integration_id, session_id=record.session_id)  # fmt: skip

    async def _run(
        self, tool: str, adapter: Adapter, acted: ActedFor, args: dict[str, Any], settings: Settings
    ) -> tuple[dict[str, Any], int]:
        key = f"mcp-{secrets.token_hex(12)}"
        if tool in (SEND_MESSAGE, SEND_FILE):
            # Where the platform posts with no message to answer, as a scheduled turn does.
            if not adapter.posts_unprompted(acted.chat.type):
                raise Unsupported(f"this bot cannot post unprompted into a {acted.chat.type} chat")
            platform = adapter.settings.platform
            env = post_envelope(adapter.integration_id, platform, acted.chat, key, acted.person)
            chat = Chat(id=adapter.unprompted_chat_id(env), type=acted.chat.type)
            acted = replace(acted, chat=chat)
        if tool == SEND_MESSAGE:
            return await tools.send_message(adapter, acted, args, key)
        if tool == SEND_FILE:
            sources = expert_sources(settings, acted.xpert_id)
            return await tools.send_file(
                adapter, acted, args, key, mcp=settings.mcp, sources=sources
            )
        if tool == HISTORY:
            return await tools.history(adapter, acted, args, records=self.records, mcp=settings.mcp)
        assert tool == MEMBERS
        return await tools.members(adapter, acted)


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _error(text: str) -> types.CallToolResult:
    import mcp_types as types

    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=True)
