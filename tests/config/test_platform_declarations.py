"""Each adapter declares its platform's published limits (its settings model's
``published_limits``) and the core reads them from there (docs/extending.md); an adapter that
declares none runs unpaced, and ``check`` and ``run`` say so."""

from __future__ import annotations

from typing import Literal

import pytest

from adapters.console.settings import ConsoleIntegration
from gateway.config.bases import IntegrationBase
from gateway.config.platform_limits import platform_defaults, undeclared_limits
from gateway.config.settings import Settings, build_settings_model
from gateway.edge.factory import discover_adapters
from gateway.experts.registry import discover_experts
from gateway.runtime.hints import platform_limit_warnings


class SilentIntegration(IntegrationBase):
    """A third-party adapter's settings that declare no published limits."""

    platform: Literal["silent"]


def settings(platform_limits: dict[str, object] | None = None) -> Settings:
    model = build_settings_model(
        {"console": ConsoleIntegration, "silent": SilentIntegration}, discover_experts()
    )
    item: dict[str, object] = {"id": "s", "platform": "silent", "xpertId": "echo"}
    if platform_limits is not None:
        item["platformLimits"] = platform_limits
    return model.model_validate(
        {"experts": [{"id": "echo", "kind": "echo"}], "integrations": [item]}
    )


@pytest.mark.parametrize("platform", sorted(discover_adapters()))
def test_every_installed_adapter_declares_its_platforms_limits(platform: str) -> None:
    model = discover_adapters()[platform].settings_model
    assert not undeclared_limits(model)
    assert platform_defaults(model) is model.published_limits


def test_an_adapter_without_a_declaration_is_unpaced_and_check_says_so() -> None:
    assert undeclared_limits(SilentIntegration)
    assert not platform_defaults(SilentIntegration).enabled
    [warning] = platform_limit_warnings(settings())
    assert warning.startswith("integrations.0: the silent adapter declares no published limits")
    paced = settings({"enabled": True, "callsPerSecond": 5})
    assert platform_limit_warnings(paced) == []


def test_a_declared_platform_is_not_warned_about() -> None:
    model = build_settings_model({"console": ConsoleIntegration}, discover_experts())
    plain = model.model_validate(
        {
            "experts": [{"id": "echo", "kind": "echo"}],
            "integrations": [{"id": "c", "platform": "console", "xpertId": "echo"}],
        }
    )
    assert platform_limit_warnings(plain) == []
