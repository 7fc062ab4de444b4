"""A fake sglang (native API) that streams authored harmony transcripts as sglang does.

Run: `python -m tests.fakes.sglang_server [--style cumulative|incremental|ids_delta] ...`;
it prints `FAKE READY <url>`. Faithful where the adapter can tell: SSE framing
(`data: {...}\\n\\n`, always `data: [DONE]`), chunk fields, the three streaming styles,
finish reasons, 400 on unknown sampling_params, its validation (the context checks with
the room speculative decoding keeps, sampling values out of range, duplicate live rids) as
an in-stream 400 error, abort by rid prefix (one more step, then an abort finish), abort
~2 s after a client disconnects, the info endpoints, `--api-key` and `--admin-api-key`.
`/_fake/log`, `/_fake/reset` and `/_fake/config` are the test's controls.
"""

from __future__ import annotations

import argparse
import asyncio
import codecs
import dataclasses
import json
import math
import time
import uuid
from array import array
from dataclasses import dataclass, field
from typing import Any

from adapters.engines.harmony import gpt_oss_encoding
from adapters.engines.scripted import schema_instance
from tests.fakes.asgi import DropConnection, EventStream, Receive, Request, Scope, Send, serve
from tests.fakes.transcripts import FAULTS, TRANSCRIPTS, long_answer, scenario

# sglang 0.5.23's SamplingParams; anything else in sampling_params is a 400.
_KEYS = """max_new_tokens stop stop_token_ids stop_regex temperature top_p top_k min_p
frequency_penalty presence_penalty repetition_penalty min_new_tokens n json_schema regex ebnf
structural_tag ignore_eos skip_special_tokens spaces_between_special_tokens no_stop_trim
custom_params stream_interval logit_bias sampling_seed"""
SAMPLING_KEYS = frozenset(_KEYS.split())
EOS = frozenset({200002, 199999, 200012})  # gpt-oss generation_config eos_token_id
FAULT_AT = 3  # the chunk at which a fault strikes


@dataclass
class Config:
    style: str = "cumulative"  # 0.5.23 default | --incremental-streaming-output | 0.5.2
    model: str = "openai/gpt-oss-120b"
    served_model_name: str = "gpt-oss-120b"
    api_key: str | None = None
    admin_api_key: str | None = None  # --admin-api-key: /abort_request takes only this key
    legacy_info: bool = False  # 0.5.2: only /get_model_info
    no_model_info: bool = False  # neither info endpoint: only /v1/models
    context_length: int = 131072
    token_delay: float = 0.0
    tokens_per_chunk: int = 1  # sglang's --stream-interval
    long_words: int = 400
    # absent | zero | count: what meta_info says (0.5.23 always sends it: 0 without a
    # reasoning parser, as for gpt-oss on /generate)
    reasoning_tokens: str = "zero"
    speculative_draft_tokens: int = 0  # > 0: EAGLE with this many draft tokens
    disconnect_abort_after: float = 2.0
    healthy: bool = True


@dataclass
class Live:
    rid: str
    abort: asyncio.Event = field(default_factory=asyncio.Event)


class FakeSglang:
    def __init__(self, config: Config) -> None:
        self.initial = config
        self.config = dataclasses.replace(config)
        self.enc = gpt_oss_encoding()
        self.live: dict[str, Live] = {}
        self.seen: list[bytes] = []  # earlier prompts+outputs (uint32s), for the prefix cache
        self.reset()

    def reset(self) -> None:
        """Forget the log and any configuration a test changed."""
        self.config = dataclasses.replace(self.initial)
        self.log: dict[str, Any] = {"requests": [], "aborts": [], "aborted": [], "finished": {}}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        request = Request(scope, receive, send)
        try:
            await self.route(request)
        except DropConnection:
            raise
        except Exception as e:  # a fake that breaks must say so to the test
            await request.json(500, {"error": {"message": f"fake sglang bug: {e!r}"}})

    async def route(self, r: Request) -> None:
        if r.path.startswith("/_fake/"):
            return await self.control(r)
        if not r.path.startswith("/health") and not self._allowed(r):
            return await r.json(401, {"error": "Unauthorized"})
        routes = {
            ("GET", "/health"): self.health,
            ("GET", "/health_generate"): self.health,
            ("GET", "/ready"): self.health,
            ("GET", "/server_info"): self.server_info,
            ("GET", "/get_server_info"): self.server_info,
            ("GET", "/v1/models"): self.models,
            ("POST", "/generate"): self.generate,
            ("PUT", "/generate"): self.generate,
            ("POST", "/abort_request"): self.abort,
        }
        if not self.config.no_model_info:
            routes[("GET", "/get_model_info")] = self.model_info
            if not self.config.legacy_info:
                routes[("GET", "/model_info")] = self.model_info
        handler = routes.get((r.method, r.path))
        if handler is None:
            return await r.json(404, {"detail": "Not Found"})
        await handler(r)

    def _allowed(self, r: Request) -> bool:
        """sglang's rule (python/sglang/srt/utils/auth.py, `decide_request_auth`):
        `/abort_request` is ADMIN_OPTIONAL (the admin key when one is set, not the api key;
        else the api key; else open); every other endpoint needs the api key when one is
        set, whatever the admin key."""
        admin, key = self.config.admin_api_key, self.config.api_key
        if r.path == "/abort_request" and admin:
            return self._authorized(r, admin)
        return not key or self._authorized(r, key)

    @staticmethod
    def _authorized(r: Request, key: str) -> bool:
        return r.headers.get("authorization") == f"Bearer {key}"

    # --- controls -------------------------------------------------------------------------

    async def control(self, r: Request) -> None:
        if r.path == "/_fake/log":
            return await r.json(200, {**self.log, "live": sorted(self.live)})
        if r.path == "/_fake/reset":
            self.reset()
            return await r.json(200, {})
        if r.path == "/_fake/config":
            for key, value in json.loads(await r.body() or b"{}").items():
                setattr(self.config, key, value)
            return await r.json(200, vars(self.config))
        await r.json(404, {"detail": "Not Found"})

    # --- info -----------------------------------------------------------------------------

    async def health(self, r: Request) -> None:
        await r.respond(200 if self.config.healthy else 503, b"", "text/plain")

    async def model_info(self, r: Request) -> None:
        info: dict[str, Any] = {
            "model_path": self.config.model,
            "tokenizer_path": self.config.model,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
        }
        if not self.config.legacy_info:
            info |= {"served_model_name": self.config.served_model_name, "model_type": "gpt_oss"}
        await r.json(200, info)

    async def server_info(self, r: Request) -> None:
        """sglang's server args (and more); the fields the adapter reads among them."""
        style = self.config.style
        drafts = self.config.speculative_draft_tokens
        await r.json(
            200,
            {
                "model_path": self.config.model,
                "served_model_name": self.config.served_model_name,
                "incremental_streaming_output": style == "incremental",
                "stream_interval": self.config.tokens_per_chunk,
                "context_length": None,  # the --context-length override: none given
                "speculative_algorithm": "EAGLE" if drafts else None,
                "speculative_num_draft_tokens": drafts or None,
                "speculative_num_steps": 3 if drafts else None,
                "speculative_eagle_topk": 1 if drafts else None,
                "version": "0.5.2" if style == "ids_delta" else "0.5.23",
            },
        )

    async def models(self, r: Request) -> None:
        card = {
            "id": self.config.served_model_name,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "sglang",
            "root": self.config.served_model_name,
            "max_model_len": self.config.context_length,
        }
        await r.json(200, {"object": "list", "data": [card]})

    # --- abort ----------------------------------------------------------------------------

    async def abort(self, r: Request) -> None:
        body = json.loads(await r.body() or b"{}")
        prefix = body.get("rid") or ""
        matched = [
            rid for rid in self.live if body.get("abort_all") or (prefix and rid.startswith(prefix))
        ]
        self.log["aborts"].append(prefix or "*")
        for rid in matched:
            self.log["aborted"].append(rid)
            self.live[rid].abort.set()
        await r.respond(200, b"", "text/plain")

    # --- generate -------------------------------------------------------------------------

    def _bad_request(self, message: str) -> dict[str, Any]:
        """sglang's 400 body (`_create_error_response`: an `ErrorResponse`)."""
        return {
            "object": "error",
            "message": message,
            "type": "Bad Request",
            "param": None,
            "code": 400,
        }

    async def generate(self, r: Request) -> None:
        try:
            body = json.loads(await r.body())
        except ValueError as e:
            return await r.json(400, self._bad_request(f"invalid JSON body: {e}"))
        self.log["requests"].append(body)
        params = body.get("sampling_params") or {}
        unknown = sorted(set(params) - SAMPLING_KEYS)
        if unknown:
            return await r.json(
                400, self._bad_request(f"Unknown sampling parameter(s): {', '.join(unknown)}")
            )
        ids = body.get("input_ids")
        if not isinstance(ids, list) or not ids:
            return await r.json(
                400, self._bad_request("Either text, input_ids or input_embeds should be provided.")
            )
        rid = body.get("rid") or uuid.uuid4().hex
        refused = self._refusal(rid, ids, params)
        if not body.get("stream"):
            if refused:
                return await r.json(400, self._bad_request(refused))
            return await self._whole(r, self._run_of(body, rid, ids, params, stream=False))
        stream = EventStream(r)
        await stream.start()
        try:
            if refused:  # a ValueError of sglang's checks, after the 200: an error chunk
                err = {
                    "message": refused,
                    "type": "invalid_request_error",
                    "code": 400,
                    "retryable": False,
                }
                await stream.data(json.dumps({"error": err}).encode())
                done = True
            else:
                done = await self._run(self._run_of(body, rid, ids, params), stream)
            if done:
                await stream.data(b"[DONE]")
                await stream.end()
        finally:
            stream.close()

    def _refusal(self, rid: str, ids: list[int], params: dict[str, Any]) -> str | None:
        """What sglang's tokenizer manager refuses, in its words and order: a duplicate
        rid, the two context checks (the prompt counted with the draft tokens speculative
        decoding reserves) and `SamplingParams.verify`; None when it accepts the request."""
        if rid in self.live:
            return f"Duplicate request ID detected: {rid}"
        context = self.config.context_length
        n = len(ids) + self.config.speculative_draft_tokens
        if n >= context:
            return (
                f"The input ({n} tokens) is longer than the model's context length "
                f"({context} tokens)."
            )
        max_new = params.get("max_new_tokens", 128)
        if max_new is not None and max_new + n >= context:
            return (
                "Requested token count exceeds the model's maximum context length of "
                f"{context} tokens. You requested a total of {max_new + n} tokens: {n} tokens "
                f"from the input messages and {max_new} tokens for the completion. Please "
                "reduce the number of tokens in the input messages or the completion to fit "
                "within the limit."
            )
        return _verify(params)

    def _run_of(
        self, body: dict[str, Any], rid: str, ids: list[int], params: dict[str, Any], **kw: Any
    ) -> Run:
        run = Run(self, rid, ids, params, **kw)
        run.return_logprob = bool(body.get("return_logprob"))
        run.top_logprobs_num = int(body.get("top_logprobs_num") or 0)
        run.return_text_in_logprobs = bool(body.get("return_text_in_logprobs"))
        return run

    async def _whole(self, r: Request, run: Run) -> None:
        """Without `stream`, sglang answers one JSON object: the whole output."""
        collected = _Collector()
        await self._run(run, collected)
        last = json.loads(collected.last) if collected.last else {}
        if "error" in last:
            return await r.json(400, last)
        await r.json(200, last)

    async def _run(self, run: Run, stream: EventStream | _Collector) -> bool:
        self.live[run.rid] = run.live
        try:
            return await run.play(stream)
        finally:
            self.live.pop(run.rid, None)
            self.seen = [*self.seen[-63:], array("I", run.input_ids + run.produced).tobytes()]
            self.log["finished"][run.rid] = run.end


def _verify(params: dict[str, Any]) -> str | None:
    """sglang's `SamplingParams.verify` (python/sglang/srt/sampling/sampling_params.py),
    for the keys the adapter sends; its message, or None."""
    temperature = params.get("temperature", 1.0)
    top_p = params.get("top_p", 1.0)
    top_k = params.get("top_k", -1)
    if not math.isfinite(temperature) or temperature < 0:
        return f"temperature must be a non-negative finite number, got {temperature}."
    if not 0.0 < top_p <= 1.0:
        return f"top_p must be in (0, 1], got {top_p}."
    if top_k < 1 and top_k != -1:
        return f"top_k must be -1 (disable) or at least 1, got {top_k}."
    for name in ("frequency_penalty", "presence_penalty"):
        if not -2.0 <= params.get(name, 0.0) <= 2.0:
            return f"{name} must be in [-2, 2], got {params[name]}."
    if params.get("max_new_tokens", 0) < 0:
        return f"max_new_tokens must be at least 0, got {params['max_new_tokens']}."
    return None


def _common_prefix(a: bytes, b: bytes) -> int:
    """Bytes in common at the start (a binary search of slice compares, done in C)."""
    lo, hi = 0, min(len(a), len(b))
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo - lo % 4


class _Collector:
    """Stands in for the event stream of a non-streamed request: keeps the last chunk."""

    def __init__(self) -> None:
        self.gone = asyncio.Event()
        self.last = b""

    async def data(self, payload: bytes) -> None:
        self.last = payload

    async def end(self) -> None:
        pass


class Run:
    """One generation: the transcript, the tokens produced so far, how it ended."""

    def __init__(
        self,
        fake: FakeSglang,
        rid: str,
        input_ids: list[int],
        params: dict[str, Any],
        stream: bool = True,
    ) -> None:
        self.fake, self.cfg, self.rid, self.input_ids = fake, fake.config, rid, input_ids
        self.params = params
        self.return_logprob = False  # top-level request keys, set by `generate`
        self.top_logprobs_num = 0
        self.return_text_in_logprobs = False
        self.style = fake.config.style if stream else "cumulative"  # one whole answer
        text = fake.enc.decode(input_ids)
        self.name = scenario(text)
        self.tokens = self._tokens(self.name)
        self.max_new = int(params.get("max_new_tokens", 128))
        self.stops = set(params.get("stop_token_ids") or []) | EOS
        self.skip_special = params.get("skip_special_tokens", True)
        self.live = Live(rid)
        self.produced: list[int] = []
        self.sent_text = ""
        self.text = ""
        self.utf8 = codecs.getincrementaldecoder("utf-8")("replace")
        self.end = "running"
        self.started = time.monotonic()
        self.cached = self._cached()  # the radix-cache hit is fixed when the request starts

    def _tokens(self, name: str) -> list[int]:
        constrained = self.params.get("json_schema")
        if constrained:
            # sglang's grammar forces every output token from the first: the answer is a
            # document of the schema, then the stop (a prompt that did not open the final
            # channel itself would get JSON where harmony wants a header, as from sglang).
            text = (
                json.dumps(schema_instance(json.loads(constrained), "constrained")) + "<|return|>"
            )
        elif name in ("long", "stall", "drop", "eof", "server_abort", "bad_counts"):
            text = long_answer(self.cfg.long_words)
        else:
            text = TRANSCRIPTS.get(name, TRANSCRIPTS["reasoning_final"])
        # Message by message (boundaries are special tokens, so this is the same encoding),
        # to know which tokens are chain-of-thought.
        tokens: list[int] = []
        self.analysis: list[bool] = []
        for i, piece in enumerate(text.split("<|start|>")):
            part = self.fake.enc.encode(("<|start|>" if i else "") + piece, allowed_special="all")
            tokens += part
            self.analysis += [piece.split("<|message|>")[0].find("analysis") >= 0] * len(part)
        return tokens

    # --- chunks ---------------------------------------------------------------------------

    def _text(self, step: list[int]) -> str:
        """The text so far; each chunk decodes only its own tokens, and a character split
        across tokens waits for its last byte, as sglang's text does."""
        enc = self.fake.enc
        if self.skip_special:
            step = [t for t in step if not enc.is_special_token(t)]
        self.text += self.utf8.decode(bytes(enc._inner.decode_bytes(step)))
        return self.text

    def _meta(self, finish: dict[str, Any] | None, extra: int = 0) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "id": self.rid,
            "finish_reason": finish,
            "prompt_tokens": len(self.input_ids),
            "weight_version": "default",
            "num_retractions": 0,
            "completion_tokens": len(self.produced) + extra,
            "cached_tokens": self.cached,
        }
        if self.cfg.reasoning_tokens != "absent":
            meta["reasoning_tokens"] = (
                0 if self.cfg.reasoning_tokens == "zero" else 0 + self._reasoning()
            )
        if finish is not None:
            meta["e2e_latency"] = time.monotonic() - self.started
        if self.return_logprob:  # as sglang keeps them: every output token so far
            meta["output_token_logprobs"] = [self._logprob(i) for i in range(len(self.produced))]
            if self.top_logprobs_num:
                meta["output_top_logprobs"] = [
                    [self._logprob(i, rank) for rank in range(self.top_logprobs_num)]
                    for i in range(len(self.produced))
                ]
        return meta

    def _logprob(self, i: int, rank: int = 0) -> list[Any]:
        """[logprob, token id, text] of output token i (rank 0: the token itself; others:
        made-up alternatives, less likely), the text as `return_text_in_logprobs` gives it."""
        tid = self.produced[i] + rank
        text = self.fake.enc.decode([tid]) if self.return_text_in_logprobs else None
        return [-0.5 * (i % 3) - 1.25 * rank, tid, text]

    def _cached(self) -> int:
        """The longest prefix shared with an earlier prompt+output, as sglang's radix cache
        would hit (at least one token is always computed)."""
        mine = array("I", self.input_ids).tobytes()
        best = max((_common_prefix(mine, earlier) for earlier in self.fake.seen), default=0)
        return min(best // 4, len(self.input_ids) - 1)

    def _reasoning(self) -> int:
        """Tokens of analysis messages produced, as a reasoning parser would count them."""
        return sum(self.analysis[: len(self.produced)])

    def chunk(self, step: list[int], finish: dict[str, Any] | None) -> bytes:
        style = self.style
        text_now = self._text(step)
        if style == "cumulative":
            out = {"text": text_now, "output_ids": list(self.produced)}
        elif style == "incremental":
            out = {"text": text_now[len(self.sent_text) :], "output_ids": step}
        else:  # 0.5.2: ids are deltas, text is cumulative
            out = {"text": text_now, "output_ids": step}
        self.sent_text = text_now
        return json.dumps({**out, "meta_info": self._meta(finish)}).encode()

    # --- the loop -------------------------------------------------------------------------

    async def play(self, stream: EventStream | _Collector) -> bool:
        """Stream the run; True when `[DONE]` follows (it does, unless the body was ended)."""
        if self.name == "stall_first":
            await self._stall(stream)
            return True
        pos, n_chunk = 0, 0
        while True:
            await asyncio.sleep(self.cfg.token_delay)
            step = self.tokens[pos : pos + self.cfg.tokens_per_chunk]
            pos += len(step)
            n_chunk += 1
            if stream.gone.is_set() and not self.live.abort.is_set():
                await self._after_disconnect()
                return True
            if self.live.abort.is_set():  # one more step, then the abort finish
                self.produced += step
                self.end = "abort"
                await stream.data(self.chunk(step, {"type": "abort", "message": "Abort request"}))
                return True
            if n_chunk == FAULT_AT and self.name in FAULTS - {"long", "no_done"}:
                return await self._fault(stream, step)
            step, finish = self._cut(step)
            self.produced += step
            await stream.data(self.chunk(step, finish))
            if finish is not None:
                self.end = finish["type"]
                if self.name == "no_done":
                    await stream.end()
                    return False
                return True

    def _cut(self, step: list[int]) -> tuple[list[int], dict[str, Any] | None]:
        room = self.max_new - len(self.produced)
        for i, token in enumerate(step[:room]):
            if token in self.stops:
                return step[: i + 1], {"type": "stop", "matched": token}
        if len(step) >= room:
            return step[:room], {"type": "length", "length": self.max_new}
        if not step:  # the transcript ran out without a stop: the model's EOS
            return [199999], {"type": "stop", "matched": 199999}
        return step, None

    async def _fault(self, stream: EventStream | _Collector, step: list[int]) -> bool:
        """Break the stream as the scenario says; True when `[DONE]` follows."""
        name = self.name
        self.end = name
        if name == "drop":
            raise DropConnection
        if name == "error_chunk":
            err = {"message": "CUDA out of memory while decoding", "type": "InternalServerError"}
            await stream.data(json.dumps({"error": {**err, "code": 500}}).encode())
        elif name == "malformed":
            await stream.data(b'{"text": "Hel", "output_ids": [1, 2')
        elif name == "server_abort":
            self.end = "abort"
            finish = {"type": "abort", "message": "The request was aborted: KV cache exhausted"}
            meta = self._meta(finish)
            await stream.data(
                json.dumps({"text": "", "output_ids": [], "meta_info": meta}).encode()
            )
        elif name == "stall":
            await self._stall(stream)
        elif name == "eof":
            await stream.end()
            return False
        elif name == "bad_counts":
            bad = {"text": "", "output_ids": step, "meta_info": self._meta(None, extra=5)}
            await stream.data(json.dumps(bad).encode())
        return True

    async def _stall(self, stream: EventStream | _Collector) -> None:
        self.end = "stalled"
        gone = asyncio.create_task(stream.gone.wait())
        aborted = asyncio.create_task(self.live.abort.wait())
        await asyncio.wait({gone, aborted}, return_when=asyncio.FIRST_COMPLETED)
        gone.cancel()
        aborted.cancel()
        if self.live.abort.is_set():
            self.end = "abort"
            await stream.data(self.chunk([], {"type": "abort", "message": "Abort request"}))
        else:
            await self._after_disconnect()

    async def _after_disconnect(self) -> None:
        """sglang notices a client that left and aborts it about 2 s later (an explicit
        abort that comes first ends it on the next step)."""
        try:
            await asyncio.wait_for(self.live.abort.wait(), self.cfg.disconnect_abort_after)
            self.end = "abort"
        except TimeoutError:
            self.end = "abort_disconnected"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument(
        "--style", choices=["cumulative", "incremental", "ids_delta"], default="cumulative"
    )
    p.add_argument("--api-key")
    p.add_argument("--admin-api-key")
    p.add_argument("--speculative-num-draft-tokens", type=int, default=0)
    p.add_argument("--legacy-info", action="store_true")
    p.add_argument("--token-delay", type=float, default=0.0)
    p.add_argument("--tokens-per-chunk", type=int, default=1)
    p.add_argument("--long-words", type=int, default=400)
    p.add_argument("--served-model-name", default="gpt-oss-120b")
    p.add_argument("--context-length", type=int, default=131072)
    a = p.parse_args(argv)
    config = Config(
        style=a.style,
        api_key=a.api_key,
        admin_api_key=a.admin_api_key,
        speculative_draft_tokens=a.speculative_num_draft_tokens,
        legacy_info=a.legacy_info,
        token_delay=a.token_delay,
        tokens_per_chunk=a.tokens_per_chunk,
        long_words=a.long_words,
        served_model_name=a.served_model_name,
        context_length=a.context_length,
    )
    serve(FakeSglang(config), a.port)


if __name__ == "__main__":
    main()
