"""The harnesses of the conformance suite (tests/conformance/), one per platform, found here:
every :class:`~tests.support.conformance.base.Harness` subclass with an ``id`` in a module of this
package or in a ``conformance.py`` of a platform's own test folder (``tests/platforms/<name>/``),
so a platform joins the suite without a line changed in it."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from tests.support.conformance.base import Answer, Harness, NoButton, Sent

__all__ = ["Answer", "Harness", "NoButton", "Sent", "harnesses"]

_TESTS = Path(__file__).resolve().parents[2]


def harnesses() -> dict[str, type[Harness]]:
    """Every platform harness by its id, in a stable order."""
    for info in pkgutil.iter_modules(__path__):
        if info.name != "base":
            importlib.import_module(f"{__name__}.{info.name}")
    for module in sorted((_TESTS / "platforms").glob("*/conformance.py")):
        importlib.import_module(f"tests.platforms.{module.parent.name}.conformance")
    found: dict[str, type[Harness]] = {}
    pending: list[type[Harness]] = [Harness]
    while pending:
        cls = pending.pop()
        pending += cls.__subclasses__()
        if "id" in vars(cls):
            found[cls.id] = cls
    return dict(sorted(found.items()))
