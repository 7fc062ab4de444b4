"""The sglang engine, native API: harmony-rendered token ids in, `POST /generate` streamed,
output token ids parsed back with harmony. The protocol facts it relies on are in
docs/engines.md ("sglang's native API: the facts the adapter relies on").

A generation that is left early (the iterator closed, cancelled, or failed while sglang was
still running it) is aborted on sglang with `POST /abort_request`, so nothing keeps
generating for a response nobody reads.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import uuid
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any, Literal

import msgspec

from adapters.engines._http import (
    HttpEngine,
    Reading,
    Timeouts,
    deadline,
    preview,
    protocol_error,
    read_deltas,
)
from adapters.engines.harmony import HarmonyParser, HarmonyRenderer
from adapters.engines.harmony.parse import TokenScore
from adapters.engines.harmony.render import announced_tools
from domain.errors import EngineError
from domain.generation import AnyDelta, Finished, FinishReason, Prompt, TokenUsage
from domain.objects import FormatJsonObject, FormatJsonSchema

log = logging.getLogger(__name__)

DEFAULT_MAX_NEW_TOKENS = 16384


# --- the wire: only the fields the adapter reads (msgspec skips the rest unparsed) ---------


class _Finish(msgspec.Struct, frozen=True):
    type: str
    matched: int | str | None = None
    length: int | None = None
    message: str | None = None


# One token's `[logprob, token id, text]` (text with `return_text_in_logprobs`).
_Logprob = tuple[float, int, str | None]


class _Meta(msgspec.Struct, frozen=True):
    completion_tokens: int
    finish_reason: _Finish | None = None
    prompt_tokens: int = 0
    cached_tokens: int = 0
    reasoning_tokens: int | None = None
    # With `return_logprob`: per output token (sglang keeps every one so far in each chunk;
    # a version that sends only the new ones is read too, see `_SglangStream._logprobs`).
    output_token_logprobs: list[_Logprob] | None = None
    output_top_logprobs: list[list[_Logprob] | None] | None = None


class _Chunk(msgspec.Struct, frozen=True):
    output_ids: list[int] | None = None
    meta_info: _Meta | None = None
    error: Any = None


_decoder = msgspec.json.Decoder(_Chunk)


class OutputIds:
    """The new output ids of each chunk, whatever sglang's streaming style.

    0.5.23 sends all ids so far in each chunk, `--incremental-streaming-output` and 0.5.2
    send only the new ones. With `n` ids consumed, a chunk of `L` ids and
    `completion_tokens = c` is cumulative if `L == c`, incremental if `n + L == c`; both
    hold only before the first id, where they agree. The style is latched the first time it
    is unambiguous, and a chunk that fits neither (or not the latched one) is refused.
    """

    def __init__(self) -> None:
        self.consumed = 0
        self.mode: Literal["cumulative", "incremental"] | None = None

    def new(self, ids: list[int], completion_tokens: int) -> list[int]:
        n, c = self.consumed, completion_tokens
        cumulative = len(ids) == c and self.mode != "incremental"
        incremental = n + len(ids) == c and self.mode != "cumulative"
        if not (cumulative or incremental):
            raise ValueError(
                f"a chunk of {len(ids)} output ids with completion_tokens={c} after {n} ids "
                f"fits neither cumulative nor incremental streaming (latched: {self.mode})"
            )
        if n and not (cumulative and incremental):
            self.mode = "cumulative" if cumulative else "incremental"
        self.consumed = c
        return ids[n:] if cumulative else ids


def _reason(finish: _Finish, what: str) -> FinishReason:
    if finish.type == "stop":
        return "stop"
    if finish.type == "length":
        return "length"
    if finish.type == "abort":
        raise EngineError(
            f"{what} aborted the generation: {finish.message or 'no reason given'}",
            code="engine_aborted",
        )
    raise protocol_error(what, f"unknown finish_reason type {finish.type!r}")


# The words of sglang's two context checks (python/sglang/srt/managers/tokenizer_manager.py,
# `_validate_one_request`): "The input (N tokens) is longer than the model's context length
# (C tokens)." and "Requested token count exceeds the model's maximum context length of C
# tokens. ...".
_TOO_LONG = ("is longer than the model's context length", "exceeds the model's maximum context")


def _stream_error(what: str, error: Any) -> EngineError:
    """An error chunk as the failure it is. sglang streams a request it refused (a
    `ValueError` from its validation: the context checks, a sampling value out of range, a
    duplicate rid) as `{"error": {"message", "type": "invalid_request_error", "code": 400}}`
    after the 200 (python/sglang/srt/entrypoints/http_server.py, `generate_request`), so a
    4xx `code` is the same failure as a 400 answer, and the context checks are
    `context_length_exceeded`; anything else is the engine's own failure."""
    message = error.get("message") if isinstance(error, dict) else error
    status = _status_of(error.get("code") if isinstance(error, dict) else None)
    text = f"{what} failed the generation: {message}"
    if status is not None and 400 <= status < 500:
        said = str(message)
        if any(words in said for words in _TOO_LONG):
            return EngineError(text, code="context_length_exceeded", said=said)
        return EngineError(text, code="engine_bad_request", said=said)
    return EngineError(text, code="engine_stream_error")


def _status_of(code: Any) -> int | None:
    """An error chunk's `code` as an HTTP status (sglang sends an int; a digit string is
    read too), else None."""
    if isinstance(code, bool):
        return None
    if isinstance(code, int):
        return code
    if isinstance(code, str) and code.isdigit():
        return int(code)
    return None


class _SglangStream:
    """The state of one `/generate` stream: ids reconciled, harmony parsed, how it ended."""

    def __init__(self, parser: HarmonyParser, what: str, *, logprobs: bool = False) -> None:
        self.parser = parser
        self.what = what
        self.logprobs = logprobs
        self.ids = OutputIds()
        self.ended = False  # sglang is done with the request (finished, failed, or aborted)
        self.finished: Finished | None = None

    def on_chunk(self, data: bytes | str) -> list[AnyDelta]:
        if self.finished is not None:
            raise protocol_error(self.what, "a chunk after the finishing one")
        try:
            chunk = _decoder.decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            raise protocol_error(self.what, f"malformed chunk ({e}): {preview(data)}") from e
        if chunk.error is not None:
            self.ended = True
            raise _stream_error(self.what, chunk.error)
        meta = chunk.meta_info
        if meta is None:
            raise protocol_error(self.what, f"a chunk without meta_info: {preview(data)}")
        if meta.finish_reason is not None and meta.finish_reason.type == "abort":
            self.ended = True  # and its tokens are not taken: the answer stops where it was
        reason = _reason(meta.finish_reason, self.what) if meta.finish_reason else None
        before = self.ids.consumed
        new = self._new_ids(chunk.output_ids or [], meta)
        scored = self._logprobs(meta, before, len(new)) if self.logprobs else None
        deltas = self.parser.feed(new, scored)
        if reason is not None:
            deltas += self.parser.release()
            self.ended = True
            self.finished = Finished(reason=reason, usage=self._usage(meta))
        return deltas

    def _logprobs(self, meta: _Meta, before: int, new: int) -> list[TokenScore] | None:
        """The scores of this chunk's new tokens: the tail of what sglang keeps (all so
        far), or the chunk's own when it sends only new ones; None (and a warning) when
        they do not line up with the ids."""
        values = meta.output_token_logprobs or []
        tops: list[list[_Logprob] | None] = list(meta.output_top_logprobs or [])
        if len(values) == meta.completion_tokens and len(values) == before + new:
            values, tops = values[before:], tops[before:]
        elif len(values) != new:
            log.warning("%s sent %d logprobs for %d new tokens", self.what, len(values), new)
            return None
        tops += [None] * (len(values) - len(tops))
        return [
            TokenScore(
                logprob=value[0],
                alternatives=[
                    (alt[0], alt[1], alt[2] if alt[2] is not None else "") for alt in top or []
                ],
            )
            for value, top in zip(values, tops, strict=True)
        ]

    def _new_ids(self, ids: list[int], meta: _Meta) -> list[int]:
        try:
            return self.ids.new(ids, meta.completion_tokens)
        except ValueError as e:
            raise protocol_error(self.what, str(e)) from e

    def _usage(self, meta: _Meta) -> TokenUsage:
        # sglang counts reasoning only with a reasoning parser of its own; for /generate it
        # reports nothing or 0, so the analysis tokens harmony saw are the count then.
        counted = self.parser.reasoning_tokens + self.parser.open_reasoning_tokens
        return TokenUsage(
            input_tokens=meta.prompt_tokens,
            cached_tokens=meta.cached_tokens,
            output_tokens=meta.completion_tokens,
            reasoning_tokens=meta.reasoning_tokens or counted,
        )


# Structured outputs (`text.format`): sglang's `/generate` applies one grammar to the whole
# output, so the prompt opens the final channel itself and the grammar covers the answer
# alone (no analysis precedes it). With tools on offer the output is left free: a grammar
# for the answer would forbid the model's calls.
FINAL_HEADER = "<|channel|>final<|message|>"


def constraint(prompt: Prompt) -> str | None:
    """The JSON schema `sampling_params.json_schema` gets for the prompt's text format."""
    fmt = prompt.text.format
    if announced_tools(prompt):
        return None
    if isinstance(fmt, FormatJsonSchema):
        return json.dumps(fmt.schema, separators=(",", ":"))
    if isinstance(fmt, FormatJsonObject):
        return '{"type":"object"}'
    return None


class SglangEngine(HttpEngine):
    """gpt-oss on sglang's native `/generate`, rendered and parsed with harmony."""

    name = "sglang"
    media: frozenset[str] = frozenset()  # harmony renders text only

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        api_key: str | None = None,
        admin_key: str | None = None,
        timeouts: Timeouts | None = None,
        renderer: HarmonyRenderer | None = None,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        super().__init__(timeouts or Timeouts(), api_key, f"sglang at {self.base_url}")
        # sglang's `--admin-api-key`: `/abort_request` is an ADMIN_OPTIONAL endpoint
        # (python/sglang/srt/utils/auth.py): with an admin key configured only that key
        # opens it (not `--api-key`), so aborts carry it and every other call the api key.
        self._abort_headers = {"Authorization": f"Bearer {admin_key}"} if admin_key else None
        self.renderer = renderer or HarmonyRenderer()
        # Encoded once: harmony's `encode` of special tokens costs over 100 µs a call.
        self._final_header = list(
            self.renderer.encoding.encode(FINAL_HEADER, allowed_special="all")
        )
        self.max_new_tokens = max_new_tokens
        self.model = model
        self.served_model: str | None = None
        self.context_length: int | None = None
        self.model_type: str | None = None
        self.draft_tokens = 0  # context sglang keeps for speculative decoding's drafts

    # --- lifecycle -----------------------------------------------------------------------

    async def start(self) -> None:
        """Learn what sglang serves (`/model_info`, else `/get_model_info`, else
        `/v1/models`); raises `EngineError` if it cannot be reached."""
        info = await self._model_info()
        self.served_model = info.get("served_model_name") or info.get("model_path")
        self.model_type = info.get("model_type")
        self.context_length = await self._context_length()
        self.draft_tokens = await self._draft_tokens()
        if self.model_type and self.model_type != "gpt_oss":
            log.warning("%s serves a %s model, not gpt-oss", self._what, self.model_type)

    def models(self) -> list[str]:
        name = self.model or self.served_model
        return [name] if name else []

    async def ready(self) -> bool:
        return await self._http.status("GET", self._url("/health")) == 200

    # --- generation ----------------------------------------------------------------------

    def context_window(self, model: str) -> int | None:
        """The tokens prompt and output may hold together on sglang: its context length,
        less the draft tokens speculative decoding reserves, less one (its check is
        `prompt + drafts + max_new_tokens >= context` → refused)."""
        if self.context_length is None:
            return None
        return self.context_length - self.draft_tokens - 1

    async def count_tokens(self, prompt: Prompt) -> int:
        """The harmony rendering's length: the very ids `generate` would send."""
        return len(self._input_ids(prompt))

    def _input_ids(self, prompt: Prompt) -> list[int]:
        """The rendering, and for a constrained answer the final channel opened."""
        ids = self.renderer.render(prompt)
        return ids + self._final_header if constraint(prompt) is not None else ids

    async def generate(self, prompt: Prompt) -> AsyncGenerator[AnyDelta, None]:
        ids = self._input_ids(prompt)
        rid = uuid.uuid4().hex  # fixed length: sglang aborts by rid *prefix*
        body: dict[str, Any] = {
            "input_ids": ids,
            "sampling_params": self.sampling_params(prompt, len(ids)),
            "stream": True,
            "rid": rid,
        }
        if prompt.wants_logprobs:  # top-level keys of /generate, not sampling params
            body["return_logprob"] = True
            body["top_logprobs_num"] = prompt.top_logprobs
            body["return_text_in_logprobs"] = True
        limit = deadline(self.timeouts)
        try:
            response = await self._http.open_stream(self._url("/generate"), body, self._what, limit)
        except EngineError as e:
            if e.code == "engine_timeout":  # sent, and perhaps running: stop it
                await self._abort(rid)
            raise
        except asyncio.CancelledError:
            await self._abort(rid)  # perhaps sent: an unknown rid is answered 200 too
            raise
        parser = HarmonyParser(self.renderer.encoding)
        if constraint(prompt) is not None:
            parser.prime(self._final_header)
        run = _SglangStream(parser, self._what, logprobs=prompt.wants_logprobs)
        try:
            reading = Reading()
            async with contextlib.aclosing(
                read_deltas(response.content.readany, self._what, limit, run.on_chunk, reading)
            ) as deltas:
                async for delta in deltas:
                    yield delta
            done = reading.done
            yield self._finished(run, done)
        finally:
            if not run.ended:
                await self._abort(rid)
            response.close()

    def sampling_params(self, prompt: Prompt, prompt_tokens: int) -> dict[str, Any]:
        """Only keys sglang knows: 0.5.23 answers 400 to any other."""
        params: dict[str, Any] = {
            "max_new_tokens": self._budget(prompt, prompt_tokens),
            "stop_token_ids": self.renderer.stop_token_ids,
            "skip_special_tokens": False,  # harmony's markers must come back
        }
        if prompt.temperature is not None:
            params["temperature"] = prompt.temperature
        if prompt.top_p == 0:
            # sglang refuses top_p outside (0, 1] (python/sglang/srt/sampling/sampling_params.py,
            # `verify`); top_p 0 keeps only the likeliest token, which is top_k 1.
            params["top_k"] = 1
        elif prompt.top_p is not None:
            params["top_p"] = prompt.top_p
        if prompt.presence_penalty:
            params["presence_penalty"] = prompt.presence_penalty
        if prompt.frequency_penalty:
            params["frequency_penalty"] = prompt.frequency_penalty
        schema = constraint(prompt)
        if schema is not None:
            params["json_schema"] = schema
        return params

    def _budget(self, prompt: Prompt, prompt_tokens: int) -> int:
        wanted = prompt.max_output_tokens or self.max_new_tokens
        window = self.context_window(prompt.model)
        if window is None:
            return wanted
        room = window - prompt_tokens
        if room <= 0:
            drafts = f" ({self.draft_tokens} kept for draft tokens)" if self.draft_tokens else ""
            raise EngineError(
                f"the prompt is {prompt_tokens} tokens; {self.served_model} holds "
                f"{self.context_length}{drafts}",
                code="context_length_exceeded",
            )
        return min(wanted, room)

    def _finished(self, run: _SglangStream, done: bool) -> Finished:
        if run.finished is None:
            if done:
                raise protocol_error(self._what, "[DONE] came before any finish_reason")
            raise EngineError(
                f"{self._what} ended the stream before the generation finished",
                code="engine_disconnected",
            )
        if not done:
            log.warning("%s finished a generation without sending [DONE]", self._what)
        return run.finished

    async def _abort(self, rid: str) -> None:
        status = await self._http.status(
            "POST", self._url("/abort_request"), {"rid": rid}, headers=self._abort_headers
        )
        if status is None:
            log.warning("could not abort request %s on %s", rid, self._what)
        elif status != 200:
            log.warning("%s refused to abort request %s: HTTP %s", self._what, rid, status)

    # --- model info ----------------------------------------------------------------------

    def _url(self, path: str) -> str:
        return self.base_url + path

    async def _model_info(self) -> dict[str, Any]:
        for path in ("/model_info", "/get_model_info"):
            try:
                info = await self._http.get_json(self._url(path), self._what)
            except EngineError as e:
                if e.code == "engine_bad_request":  # 404: an older or newer sglang
                    continue
                raise
            if isinstance(info, dict):
                return info
        first = await self._first_model()
        if first is None:
            raise EngineError(
                f"{self._what} names no model on /model_info, /get_model_info or /v1/models",
                code="engine_protocol_error",
            )
        return {"served_model_name": first.get("id")}

    async def _first_model(self) -> dict[str, Any] | None:
        listing = await self._http.get_json(self._url("/v1/models"), self._what)
        data = listing.get("data") if isinstance(listing, dict) else None
        if isinstance(data, list) and data and isinstance(data[0], dict):
            return data[0]
        return None

    async def _context_length(self) -> int | None:
        """From `/v1/models` (`max_model_len`); unknown if that fails."""
        try:
            first = await self._first_model()
        except EngineError as e:
            log.warning("%s: no context length (%s); not capping max_new_tokens", self._what, e)
            return None
        length = first.get("max_model_len") if first else None
        return length if isinstance(length, int) else None

    async def _draft_tokens(self) -> int:
        """The context sglang reserves per request for speculative decoding (EAGLE and the
        like), from `/server_info` (else `/get_server_info`, 0.5.2): its tokenizer manager
        adds `speculative_num_draft_tokens` to the prompt before its context checks
        (python/sglang/srt/managers/tokenizer_manager.py, `reserve_input_token_num`). 0
        without speculation or when the settings cannot be read."""
        for path in ("/server_info", "/get_server_info"):
            try:
                info = await self._http.get_json(self._url(path), self._what)
            except EngineError as e:
                if e.code == "engine_bad_request":  # 404: the other name
                    continue
                log.warning("%s: no server info (%s); no room kept for drafts", self._what, e)
                return 0
            return _drafts_of(info) if isinstance(info, dict) else 0
        return 0


def _drafts_of(info: dict[str, Any]) -> int:
    """`speculative_num_draft_tokens` when `speculative_algorithm` is set (sglang's
    `SpeculativeAlgorithm.from_string`: None or "NONE" is no speculation), else 0."""
    algorithm = info.get("speculative_algorithm")
    if not algorithm or str(algorithm).upper() == "NONE":
        return 0
    drafts = info.get("speculative_num_draft_tokens")
    return drafts if isinstance(drafts, int) and not isinstance(drafts, bool) and drafts > 0 else 0


if TYPE_CHECKING:  # the port is structural: let mypy prove this adapter fits it
    from service.ports import Engine

    def _fits_the_port(engine: SglangEngine) -> Engine:
        return engine
