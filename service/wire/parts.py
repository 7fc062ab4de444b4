"""The content parts of an input message (text, refusal, image, file) as domain parts;
images and files are kept inline, bounded by `max_file_bytes`."""

from __future__ import annotations

import re

from domain.errors import InvalidRequest
from domain.objects import InputFile, InputImage, InputPart, InputText, OutputText, Refusal
from service.wire.limits import Limits, check_text, short
from service.wire.request import (
    ContentPartParam,
    InputFileParam,
    InputImageParam,
    OutputTextParam,
    RefusalParam,
)


def read_part(part: ContentPartParam, param: str, limits: Limits) -> InputPart:
    """One content part of an input message as its domain part."""
    if isinstance(part, RefusalParam):
        return Refusal(refusal=part.refusal)
    if isinstance(part, InputImageParam | InputFileParam):
        return _media(part, param, limits)
    check_text(f"{param}.text", part.text, limits)
    return (
        OutputText(text=part.text)
        if isinstance(part, OutputTextParam)
        else InputText(text=part.text)
    )


_IMAGE_URL = re.compile(r"^(data:image/[a-z0-9.+-]+;base64,|https?://)", re.IGNORECASE)
_FILE_DATA = re.compile(r"^data:[a-z0-9.+-]+/[a-z0-9.+-]+;base64,", re.IGNORECASE)


def _media(part: InputImageParam | InputFileParam, param: str, limits: Limits) -> InputPart:
    """An image or file part: kept as sent, bounded by `max_file_bytes`. This server has no
    Files API, so a `file_id` is refused, as is a `file_url` (it would have the server
    fetch any URL a client names)."""
    if part.file_id is not None:
        raise InvalidRequest(
            f"Invalid '{param}.file_id': this server has no Files API; send the bytes inline "
            "(a data URL in image_url or file_data).",
            param=f"{param}.file_id",
            code="unsupported_parameter",
        )
    if isinstance(part, InputImageParam):
        url = part.image_url or ""
        if not _IMAGE_URL.match(url):
            raise InvalidRequest(
                f"Invalid '{param}.image_url': expected a data URL (data:image/...;base64,...) "
                "or an http(s) URL.",
                param=f"{param}.image_url",
                code="invalid_value",
            )
        _check_blob(f"{param}.image_url", url, limits)
        return InputImage(detail=part.detail, image_url=url)
    if part.file_url is not None:
        raise InvalidRequest(
            f"Invalid '{param}.file_url': files by URL are not supported; send file_data.",
            param=f"{param}.file_url",
            code="unsupported_parameter",
        )
    data = part.file_data or ""
    if not _FILE_DATA.match(data):
        raise InvalidRequest(
            f"Invalid '{param}.file_data': expected a data URL (data:<type>;base64,...).",
            param=f"{param}.file_data",
            code="invalid_value",
        )
    _check_blob(f"{param}.file_data", data, limits)
    return InputFile(file_data=data, filename=short(f"{param}.filename", part.filename, 256))


def _check_blob(param: str, value: str, limits: Limits) -> None:
    if len(value) > limits.max_file_bytes:
        raise InvalidRequest(
            f"Invalid '{param}': larger than {limits.max_file_bytes} bytes.",
            param=param,
            code="string_above_max_length",
        )
