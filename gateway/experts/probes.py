"""``xpert-gateway check --probe``: each remote expert's URL and key tried with one request that
runs nothing (``Expert.probe``)."""

from __future__ import annotations

import uuid
from typing import Any

from gateway.config.bases import ExpertBase
from gateway.experts.a2a_protocol import CARD_PATH, VERSION, CardError, endpoint_of
from gateway.experts.http import ExpertHttpError, probe_get, where


async def probe_openai(_cls: Any, settings: ExpertBase) -> str:
    """``GET {baseUrl}/models`` with the key (the OpenAI API's "List models"): reached, key
    accepted, and whether the configured model is among those listed (a server that lists none
    answers the probe all the same)."""
    url = f"{getattr(settings, 'base_url', '')}/models"
    key = getattr(settings, "api_key", None)
    headers = {"Authorization": f"Bearer {key.get_secret_value()}"} if key is not None else {}
    _, body = await probe_get("The model's API", url, headers)
    data = body.get("data") if isinstance(body, dict) else None
    ids = [m.get("id") for m in data or [] if isinstance(m, dict)]
    if not ids:
        return f"{where(url)}: reached, key accepted"
    model = getattr(settings, "model", "")
    listed = "listed" if model in ids else f"not among the {len(ids)} listed"
    return f"{where(url)}: reached, key accepted, model {model} {listed}"


async def probe_xpert(_cls: Any, settings: ExpertBase) -> str:
    """``GET {baseUrl}/assistants/{assistantId}`` with the key (XpertAI's AssistantsController,
    ``@Get(':id')`` behind its API key guard, in xpert-ai/xpert's server-ai): reached, key
    accepted, the agent found."""
    agent = getattr(settings, "assistant_id", None) or settings.id
    url = f"{getattr(settings, 'base_url', '')}/assistants/{agent}"
    headers = {"x-api-key": settings.api_key.get_secret_value()}  # type: ignore[attr-defined]
    organization = getattr(settings, "organization_id", None)
    if organization:
        headers["organization-id"] = organization
    _, body = await probe_get("XpertAI", url, headers)
    name = body.get("name") if isinstance(body, dict) else None
    return f"{where(url)}: reached, key accepted, agent {agent}" + (f" ({name})" if name else "")


def _is_uuid(value: str) -> bool:
    try:
        uuid.UUID(value)
    except ValueError:
        return False
    return True


async def probe_langgraph(_cls: Any, settings: ExpertBase) -> str:
    """The assistant, as the LangGraph Agent Server's API finds it without running anything
    (langgraph-api ``api/assistants.py``): an assistant id (a UUID) by ``GET
    {baseUrl}/assistants/{id}``, a graph id by ``POST {baseUrl}/assistants/search`` with its
    ``graph_id`` (404 for a graph the server does not serve); ``x-api-key`` when set."""
    agent = getattr(settings, "assistant_id", None) or settings.id
    base = getattr(settings, "base_url", "")
    key = getattr(settings, "api_key", None)
    headers = {"x-api-key": key.get_secret_value()} if key is not None else {}
    backend = "The LangGraph agent"
    if _is_uuid(agent):
        url = f"{base}/assistants/{agent}"
        _, body = await probe_get(backend, url, headers)
        found = body if isinstance(body, dict) else {}
    else:
        url = f"{base}/assistants/search"
        _, body = await probe_get(backend, url, headers, post={"graph_id": agent, "limit": 1})
        listed = [a for a in body if isinstance(a, dict)] if isinstance(body, list) else []
        if not listed:
            raise ExpertHttpError(f"{where(url)}: the server has no assistant of graph {agent}.")
        found = listed[0]
    assistant = found.get("assistant_id") or agent
    name = found.get("name")
    named = f" ({name})" if name and name != assistant else ""
    graph = found.get("graph_id") or "?"
    return f"{where(url)}: reached, assistant {assistant}{named}, graph {graph}"


async def probe_a2a(_cls: Any, settings: ExpertBase) -> str:
    """The agent card at ``{url}/.well-known/agent-card.json``, with the configured headers:
    the agent's name and the interface the kind would use (``a2a_protocol.endpoint_of``), or
    why the card offers none we speak."""
    url = getattr(settings, "url", "") + CARD_PATH
    secrets = getattr(settings, "headers", {})
    headers = {k: v.get_secret_value() for k, v in secrets.items()}
    headers["A2A-Version"] = VERSION
    _, card = await probe_get("The A2A agent", url, headers)
    try:
        endpoint = endpoint_of(card)
    except CardError as exc:
        raise ExpertHttpError(f"{where(url)}: {exc}.") from exc
    streaming = "streaming" if endpoint.streaming else "not streaming"
    return (
        f"{where(url)}: reached, agent {endpoint.name or '(unnamed)'}, A2A {VERSION} over "
        f"{endpoint.binding} at {where(endpoint.url)} ({streaming})"
    )
