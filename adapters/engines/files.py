"""The text of a file part (`input_file`) for an engine that reads only text, as the peers
do: a `text/*` (or JSON, XML, CSV) file is its decoded text, a PDF the text of its pages
(pypdf); anything else cannot be read, which fails the generation with a clear reason."""

from __future__ import annotations

import base64
import binascii
import io

from domain.errors import EngineError
from domain.objects import InputFile

_TEXTUAL = ("text/", "application/json", "application/xml", "application/csv")


def file_text(part: InputFile) -> str:
    """`[file <name>]` and the file's text."""
    header, _, payload = (part.file_data or "").partition(",")
    kind = header.removeprefix("data:").split(";")[0].lower()
    name = part.filename or "(unnamed)"
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError) as exc:
        raise EngineError(f"file {name}: its data is not base64", code="invalid_prompt") from exc
    if kind.startswith(_TEXTUAL):
        text = data.decode("utf-8", errors="replace")
    elif kind == "application/pdf":
        text = _pdf_text(name, data)
    else:
        raise EngineError(f"file {name}: cannot read {kind} as text", code="invalid_prompt")
    return f"[file {name}]\n{text}"


def _pdf_text(name: str, data: bytes) -> str:
    from pypdf import PdfReader
    from pypdf.errors import PdfReadError

    try:
        reader = PdfReader(io.BytesIO(data))
        return "\n".join(page.extract_text() or "" for page in reader.pages)
    except (PdfReadError, ValueError, KeyError) as exc:
        raise EngineError(
            f"file {name}: not a readable PDF ({exc})", code="invalid_prompt"
        ) from exc
