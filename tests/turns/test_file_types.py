"""A downloaded file's type: the platform's when it names one, else the file name's (Lark and
WeCom serve files as bare bytes), else a PDF's magic number."""

from __future__ import annotations

import pytest

from gateway.edge.downloads import FetchedFile
from gateway.turns.attachments import file_type


@pytest.mark.parametrize(
    ("mime", "name", "data", "expected"),
    [
        ("application/pdf", None, b"x", "application/pdf"),
        ("Text/Plain; charset=utf-8", "a.pdf", b"x", "text/plain"),  # the platform's wins
        ("application/octet-stream", "季度报告.PDF", b"x", "application/pdf"),
        ("application/octet-stream", "notes.md", b"# hi", "text/markdown"),
        ("", "table.csv", b"a,b", "text/csv"),
        ("binary/octet-stream", None, b"%PDF-1.7 ...", "application/pdf"),
        ("application/octet-stream", "blob", b"\x00\x01", "application/octet-stream"),
    ],
)
def test_file_type(mime: str, name: str | None, data: bytes, expected: str) -> None:
    assert file_type(FetchedFile(data=data, mime=mime), name) == expected
