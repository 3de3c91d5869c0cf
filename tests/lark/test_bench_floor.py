"""bench/lark_floor.py (issue 15's floor: the daemon with its Lark work free) hands intake the
Envelopes the real webhook path builds for the same events, so what it measures is the rest of
the path under the real load. The real path here is the running gateway's own Lark adapter:
signature, timestamp, decryption, both parses, the token and the Envelope."""

from __future__ import annotations

from multidict import CIMultiDict, CIMultiDictProxy

from adapters.lark import LarkAdapter
from bench.lark_floor import bench_event, envelope_of, envelopes  # (puts bench/ on sys.path)
from tests.support.lark import INTEGRATION, LarkHarness, sealed

EXCLUDED = {"envelope_id", "received_at"}  # a fresh id and time for every Envelope built


async def test_the_floor_envelopes_are_the_ones_the_webhook_builds(lark: LarkHarness) -> None:
    adapter = lark.gw.gateway.adapters[INTEGRATION]
    assert isinstance(adapter, LarkAdapter)
    for i in (0, 1, 199, 200):
        event = bench_event(i)
        body, headers = sealed(event)
        payload = adapter.inbound.verify(CIMultiDictProxy(CIMultiDict(headers)), body)
        real = adapter.inbound.envelope(payload)
        assert real is not None
        floor = envelope_of(event)
        assert floor.model_dump(exclude=EXCLUDED) == real.model_dump(exclude=EXCLUDED)
        assert floor.to_json() != real.to_json()  # not the same object: its own id and time
    assert real.chat.id == "oc_bench0" and real.bot_mentioned and real.text == "question 200"


def test_every_floor_envelope_is_its_own_event() -> None:
    built = envelopes(300)
    assert len({e.event_id for e in built}) == 300
    assert len({e.chat.id for e in built}) == 200
