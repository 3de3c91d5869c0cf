"""The daemon with its Lark work free: the floor of everything else on the webhook path.

``python bench/lark_floor.py run --config C --port N`` is ``python -m gateway run`` with one
change, made in this process only: the Lark webhook's ``verify`` and ``parse`` hooks skip the
signature check, the decryption, both JSON parses and the Envelope's construction, and hand
intake the next of ``FLOOR_EVENTS`` Envelopes built before the daemon starts. They are built by
the adapter's own ``message_envelope`` from the events ``lark_bench.sealed_event`` seals (one of
200 group chats, the bot @-mentioned, each its own message id), so intake sees what it sees
under the real load (``tests/lark/test_bench_floor.py`` checks that they are the webhook's).
Everything else a webhook costs stays as it is: aiohttp, the route and the integration's
look-up, the body read, intake (dedup, budgets, the durable store), the metrics and the answer.

``lark_ingest.py --floor`` runs it as a fourth server beside the others: its events/s over bare
aiohttp's is the most the daemon could reach if verifying, decrypting and parsing a Lark event
cost nothing (issue 15's first target asks 0.5 with that work done). ``instructions.py ingest
--server floor`` counts its instructions per event. A bench tool, never the product: nothing
under gateway/ or adapters/ knows of it.

Each round of ``lark_ingest.py`` deletes the daemon's dedup marks and bursts, and a round sends
fewer than ``FLOOR_EVENTS`` events, so no Envelope is seen twice while its mark is kept (the
JSON's ``floor_repeats``, the floor's ``xgw_ingested_total{status="duplicate"}``, says so).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
if str(ROOT / "bench") not in sys.path:  # lark_bench's own imports (last: it shadows nothing)
    sys.path.append(str(ROOT / "bench"))

from lark_bench import bench_event  # noqa: E402

from adapters.lark.events import message_envelope  # noqa: E402
from adapters.lark.inbound import LarkWebhook  # noqa: E402
from gateway.envelope import Envelope  # noqa: E402
from tests.fakes.lark import BOT_OPEN_ID  # noqa: E402
from tests.support.lark import INTEGRATION  # noqa: E402

# More than one 5-second round at 10,000 events/s; $XGW_FLOOR_EVENTS sets another count
# (bench/instructions.py: the events it sends, as building them under valgrind takes a while).
FLOOR_EVENTS = 60_000


def envelope_of(event: dict[str, Any]) -> Envelope:
    """The Envelope of a plain (verified, decrypted, parsed) bench event, by the adapter's own
    ``message_envelope`` with the bench integration's settings (the fake Lark's bot, no raw
    payload kept)."""
    return message_envelope(INTEGRATION, event, BOT_OPEN_ID, keep_raw=False)


def envelopes(count: int = FLOOR_EVENTS) -> list[Envelope]:
    """``count`` Envelopes as the webhook builds them from ``lark_bench``'s bench events."""
    return [envelope_of(bench_event(i)) for i in range(count)]


class Floor:
    """The two hooks' stand-ins: a verified payload of nothing, then the next Envelope."""

    def __init__(self, prepared: list[Envelope]) -> None:
        self.prepared = prepared
        self.next = 0

    def verify(self, _adapter: Any, _request: Any, _body: bytes) -> dict[str, Any]:
        return {}

    async def parse(self, _adapter: Any, _payload: Any) -> Envelope:
        envelope = self.prepared[self.next]
        self.next = (self.next + 1) % len(self.prepared)
        return envelope


def install(prepared: list[Envelope]) -> Floor:
    """Replace the Lark webhook's verify and parse hooks in this process."""
    floor = Floor(prepared)
    # Bound methods of ``floor``: looked up on a webhook, they are not bound again.
    LarkWebhook.verify = floor.verify  # type: ignore[method-assign,assignment]
    LarkWebhook.parse = floor.parse  # type: ignore[method-assign,assignment]
    return floor


def main() -> int:
    install(envelopes(int(os.environ.get("XGW_FLOOR_EVENTS", FLOOR_EVENTS))))
    from gateway.runtime.cli import main as gateway_main

    return gateway_main(sys.argv[1:])


if __name__ == "__main__":
    raise SystemExit(main())
