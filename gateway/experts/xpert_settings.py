"""The settings of the ``xpert`` expert kind (an XpertAI agent, gateway/experts/xpert.py)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, SecretStr, field_validator, model_validator

from gateway.config.bases import ExpertBase, VariableDecl
from gateway.config.model import GatewayModel, http_url


class PrincipalEntry(GatewayModel):
    """A sender mapped to an XpertAI user: the entry matches a turn when every field it gives
    equals the turn's (``email`` without regard to case); ``userId`` is then sent as
    ``x-principal-user-id``."""

    integration_id: str | None = Field(None, min_length=1, max_length=128)
    sender_id: str | None = Field(None, min_length=1, max_length=256)
    email: str | None = Field(None, pattern=r"^[^@\s]+@[^@\s]+$", max_length=254)
    user_id: str = Field(
        min_length=1, max_length=128, description="An XpertAI user id in the API key's tenant"
    )

    @model_validator(mode="after")
    def _matches_something(self) -> PrincipalEntry:
        if self.integration_id is None and self.sender_id is None and self.email is None:
            raise ValueError("give at least one of integrationId, senderId, email")
        if self.sender_id is not None and self.integration_id is None:
            # A sender id means something only on its platform (and the console's is whatever
            # its request says): an entry naming one names its integration (issue 36).
            raise ValueError("an entry with senderId needs integrationId")
        return self


class XpertExpertSettings(ExpertBase):
    """An XpertAI agent through its Agent-Protocol API (threads, runs/stream SSE)."""

    kind: Literal["xpert"]
    base_url: str = Field(description="The API root, e.g. https://api.xpertai.cn/api/ai")
    api_key: SecretStr
    assistant_id: str | None = Field(None, description="The xpertId; defaults to the expert id")
    organization_id: str | None = None
    principal_user_id: str | None = Field(
        None,
        description="Sent as x-principal-user-id for a sender no principals entry matches: "
        "act as this XpertAI user",
    )
    principals: list[PrincipalEntry] = Field(
        default_factory=list,
        description="Senders mapped to XpertAI users (first match wins, else principalUserId)",
    )
    group_identity: Literal["sender", "shared"] = Field(
        "sender",
        description="In a group, sender: each turn acts as its own sender (principals), a "
        "burst is split by sender, a steer goes only into the same sender's run and each "
        "XpertAI user has its own thread; shared: the group is one identity (principalUserId, "
        "or the assistant's technical user): senders' messages merge and share one thread",
    )
    connect_retries: int = Field(3, ge=0, le=10, description="Retries before the first byte")
    idle_timeout_seconds: float = Field(
        120, gt=0, description="A stream silent this long ends the turn with an error"
    )
    file_parse_wait_seconds: float = Field(
        30,
        ge=0,
        le=600,
        description="How long a turn waits for XpertAI to read the files it uploaded (a file "
        "over 2 MB is parsed in the background) before the run goes on",
    )
    show_reasoning: bool = False
    clarifications: bool = Field(
        True,
        description="After a run that ended well, read the thread's state (all its messages: "
        "megabytes on a long thread) for an ask_clarification question (clarification "
        "middleware): shown with its options as buttons",
    )
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
