"""The settings of the ``xpert`` expert kind (an XpertAI agent, gateway/experts/xpert.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, field_validator

from gateway.config.bases import ExpertBase, VariableDecl
from gateway.config.model import http_url


class XpertExpertSettings(ExpertBase):
    """An XpertAI agent through its Agent-Protocol API (threads, runs/stream SSE)."""

    kind: Literal["xpert"]
    base_url: str = Field(description="The API root, e.g. https://api.xpertai.cn/api/ai")
    api_key: SecretStr
    assistant_id: str | None = Field(None, description="The xpertId; defaults to the expert id")
    organization_id: str | None = None
    principal_user_id: str | None = Field(
        None, description="Sent as x-principal-user-id: act as this end user"
    )
    connect_retries: int = Field(3, ge=0, le=10, description="Retries before the first byte")
    idle_timeout_seconds: float = Field(
        120, gt=0, description="A stream silent this long ends the turn with an error"
    )
    show_reasoning: bool = False
    memory_variable: str | None = Field(
        None,
        pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$",
        description="A state variable the xpert declares: the chat's group memory goes there "
        "(numbered lines) whenever it changed; unset, group memory is not sent",
    )
    variables: list[VariableDecl] = Field(default_factory=list)

    @field_validator("base_url")
    @classmethod
    def _url(cls, value: str) -> str:
        return http_url(value)
