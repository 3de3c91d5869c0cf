"""``xpert-gateway check --probe``: each remote expert's URL and key tried with one request that
runs nothing (``Expert.probe``)."""

from __future__ import annotations

from typing import Any

from gateway.config.bases import ExpertBase
from gateway.experts.http import probe_get, where


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
