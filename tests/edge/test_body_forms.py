"""The kit's form reader (``gateway.edge.body.form_fields``): a platform whose webhooks post
``application/x-www-form-urlencoded`` bodies (Slack's interactivity callbacks carry their JSON
in a ``payload`` field) reads them bounded like JSON and XML, with no core edit: fields counted
before parsing, each name once, UTF-8 before and after percent-decoding, and any other body a
400, never another exception."""

from __future__ import annotations

from urllib.parse import urlencode

import pytest
from hypothesis import given
from hypothesis import strategies as st

from gateway.edge.body import MAX_FIELDS, form_fields, json_object
from gateway.errors import Refused


def test_a_form_with_a_json_payload_reads_field_by_field() -> None:
    body = urlencode({"payload": '{"type":"block_actions","user":{"id":"U1"}}', "v": "é ✓"})
    fields = form_fields(body.encode())
    assert fields["v"] == "é ✓"
    assert json_object(fields["payload"], "payload")["user"] == {"id": "U1"}


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"a=1&a=2", "a form field given twice"),
        (b"a=%ff", "not a valid form"),
        (b"\xff=1", "not UTF-8"),
        (b"&".join(b"f%d=1" % i for i in range(MAX_FIELDS + 1)), "too many form fields"),
        (b"&" * 10_000, "too many form fields"),
    ],
)
def test_a_body_that_is_not_a_bounded_form_is_a_400(body: bytes, reason: str) -> None:
    with pytest.raises(Refused) as refused:
        form_fields(body)
    assert refused.value.status == 400
    assert refused.value.public == f"body: {reason}"


def test_the_field_bound_is_the_callers() -> None:
    assert len(form_fields(b"&".join(b"f%d=1" % i for i in range(MAX_FIELDS)))) == MAX_FIELDS
    assert form_fields(b"a=1&b=2&c=3", max_fields=3) == {"a": "1", "b": "2", "c": "3"}
    with pytest.raises(Refused):
        form_fields(b"a=1&b=2&c=3&d=4", max_fields=3)


@given(st.binary(max_size=600) | st.text(max_size=300).map(str.encode))
def test_any_body_is_fields_or_a_400(body: bytes) -> None:
    try:
        fields = form_fields(body)
    except Refused as refused:
        assert refused.status == 400
    else:
        assert all(isinstance(k, str) and isinstance(v, str) for k, v in fields.items())
        assert len(fields) <= MAX_FIELDS
