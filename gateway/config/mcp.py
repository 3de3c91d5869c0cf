"""``mcp``: the gateway's MCP server of chat actions (gateway/actions, docs/mcp.md) - where it is
served, the clients that may call it (a bearer token each, and the experts whose chats they may
act in) and its bounds."""

from __future__ import annotations

from pydantic import Field, SecretStr

from gateway.config.model import ID_PATTERN, GatewayModel

MCP_TOKEN_MIN = 16
MIB = 1024 * 1024


class McpClient(GatewayModel):
    id: str = Field(pattern=ID_PATTERN, description="Named in the audit trail and /metrics")
    token: SecretStr = Field(
        description=f"Bearer token the client sends (at least {MCP_TOKEN_MIN} characters)"
    )
    experts: list[str] = Field(
        min_length=1,
        description="The client acts only in chats with a live or recent session of one of "
        "these experts",
    )


class McpSettings(GatewayModel):
    path: str = Field(
        "/mcp", pattern=r"^/[A-Za-z0-9_./-]{0,100}$", description="Where the MCP endpoint is served"
    )
    clients: list[McpClient] = Field(
        default_factory=list, description="Who may call it; none: the endpoint is not served"
    )
    recent_hours: float = Field(
        24,
        gt=0,
        le=168,
        description="A chat whose session of the client's expert was active this long ago or "
        "later counts as one the client may act in",
    )
    calls_per_minute: int = Field(
        60, ge=1, le=100_000, description="Tool calls per client per minute, all replicas"
    )
    max_request_bytes: int = Field(
        int(28 * MIB),
        ge=4096,
        le=64 * MIB,
        description="A request body above is a 413 (a file in contentBase64 is 4/3 its size)",
    )
    max_file_bytes: int = Field(
        20 * MIB, ge=1, le=30 * MIB, description="A file chat_send_file sends, at most"
    )
    history_limit: int = Field(50, ge=1, le=200, description="chat_history's largest limit")

    @property
    def enabled(self) -> bool:
        return bool(self.clients)

    def describe(self) -> str:
        """For ``check``: where it is served and to whom (no token)."""
        if not self.enabled:
            return "off (no mcp.clients)"
        clients = ", ".join(f"{c.id} -> {'/'.join(c.experts)}" for c in self.clients)
        return f"on at {self.path} for {clients}; {self.calls_per_minute} calls/min per client"

    def problems(self, experts: set[str]) -> list[str]:
        out: list[str] = []
        seen: set[str] = set()
        for i, client in enumerate(self.clients):
            where = f"mcp.clients.{i}"
            if client.id in seen:
                out.append(f"{where}.id: duplicate id {client.id!r}")
            seen.add(client.id)
            text = client.token.get_secret_value()
            if not text.isascii() or not text.isprintable() or " " in text:
                out.append(f"{where}.token: printable ASCII without spaces (a header value)")
            elif len(text) < MCP_TOKEN_MIN:
                out.append(
                    f"{where}.token: too short ({len(text)} characters): at least "
                    f"{MCP_TOKEN_MIN} (e.g. openssl rand -hex 24)"
                )
            for expert in client.experts:
                if expert not in experts:
                    out.append(
                        f"{where}.experts: {expert!r} names no expert "
                        f"(experts: {', '.join(sorted(experts))})"
                    )
        tokens = [c.token.get_secret_value() for c in self.clients]
        if len(set(tokens)) != len(tokens):
            out.append("mcp.clients: two clients share a token (each must be its own)")
        return out
