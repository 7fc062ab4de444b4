"""The text of a file part for a text-only upstream (adapters/engines/files.py)."""

from __future__ import annotations

import base64

import pytest

from adapters.engines.files import file_text
from domain.errors import EngineError
from domain.objects import InputFile


def _pdf(text: str) -> bytes:
    """A one-page PDF showing `text` (built by hand: offsets computed, so pypdf reads it)."""
    stream = f"BT /F1 12 Tf 72 712 Td ({text}) Tj ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    out, offsets = b"%PDF-1.4\n", []
    for n, body in enumerate(objects, 1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % n + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % o for o in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return out


def _part(kind: str, data: bytes, name: str = "f") -> InputFile:
    url = f"data:{kind};base64," + base64.b64encode(data).decode()
    return InputFile(file_data=url, filename=name)


def test_text_and_pdf_files_become_their_text() -> None:
    assert file_text(_part("text/csv", b"a,b\n1,2", "t.csv")) == "[file t.csv]\na,b\n1,2"
    assert "Hello PDF" in file_text(_part("application/pdf", _pdf("Hello PDF"), "h.pdf"))


@pytest.mark.parametrize(
    ("kind", "data"), [("image/png", b"\x89PNG"), ("application/pdf", b"not a pdf")]
)
def test_what_cannot_be_read_as_text_is_a_clear_engine_error(kind: str, data: bytes) -> None:
    with pytest.raises(EngineError) as caught:
        file_text(_part(kind, data, "x"))
    assert caught.value.code == "invalid_prompt" and "file x" in str(caught.value)
