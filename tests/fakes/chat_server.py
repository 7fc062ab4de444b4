"""A fake OpenAI-compatible chat-completions server (the vLLM/sglang `/v1` shape).

Run: `python -m tests.fakes.chat_server [--api-key K]`; prints `FAKE READY <url>`. Streams
`chat.completion.chunk`s (`data: {...}\\n\\n`, then a usage chunk with empty `choices` when
`stream_options.include_usage`, then `data: [DONE]`). The last user message picks a
scenario with `[fake:NAME]`: text (default), reasoning (`reasoning_content`),
reasoning_field (`reasoning`), tool_calls (two, by index), refusal, long, error_400,
error_500, stream_error, drop, stall, no_usage; mcp_loop (a step per tool answer after the
last user message: call `echo`, then `shout`, then answer; docs/mcp.md). One chunk is one
token; `max_tokens` cuts with `finish_reason: "length"`. A client that disconnects is
recorded, and its generation stops, as vLLM's does.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import re
import time
import uuid
from dataclasses import dataclass
from typing import Any

from tests.fakes.asgi import DropConnection, EventStream, Receive, Request, Scope, Send, serve

_MARKER = re.compile(r"\[fake:([a-z_0-9]+)\]")


@dataclass
class Config:
    models: tuple[str, ...] = ("tiny-chat",)
    api_key: str | None = None
    token_delay: float = 0.0
    cached_tokens: int = 0
    long_words: int = 200
    tokenize: bool = True  # serve vLLM's `POST /tokenize` (off: 404, as upstreams without it)
    max_model_len: int = 2048  # vLLM's `/v1/models` gives each model's window


def _words(text: str) -> list[str]:
    """The fake's tokens: words with their leading space."""
    return re.findall(r"\s*\S+", text)


def _plan(name: str, config: Config) -> list[tuple[str, Any]]:
    """What a scenario streams: (field, value) steps, one token each."""
    if name in ("reasoning", "reasoning_field"):
        key = "reasoning_content" if name == "reasoning" else "reasoning"
        steps = [(key, w) for w in _words("The user greets me; reply kindly.")]
        return steps + [("content", w) for w in _words("Hello! Nice to meet you.")]
    if name == "tool_calls":
        return [
            ("content", "Checking both."),
            ("call", (0, "call_a1", "get_weather", "")),
            ("args", (0, '{"location":')),
            ("args", (0, ' "Paris"}')),
            ("call", (1, "call_b2", "get_weather", '{"location": ')),
            ("args", (1, '"Rome"}')),
        ]
    if name == "refusal":
        return [("refusal", w) for w in _words("I can't help with that.")]
    if name.startswith("mcp_loop_"):
        return _MCP_LOOP[int(name.rsplit("_", 1)[1])]
    if name in ("long", "drop", "stall"):
        return [("content", f" w{i}") for i in range(config.long_words)]
    return [("content", w) for w in _words("Hello! How can I help you today?")]


# An MCP tool loop through chat-completions (`[fake:mcp_loop]`): the upstream's tool calls.
_MCP_LOOP: list[list[tuple[str, Any]]] = [
    [("call", (0, "call_e1", "echo", "")), ("args", (0, '{"text": "one"}'))],
    [("call", (0, "call_s2", "shout", '{"text":')), ("args", (0, ' "two"}'))],
    [("content", w) for w in _words("Done after two tools.")],
]


def prompt_tokens(body: dict[str, Any]) -> int:
    """The fake's tokenizer: words of each message's text plus 3 for its template; what
    both its usage and its `/tokenize` report."""
    return sum(
        len(_words(m["content"])) + 3
        for m in body.get("messages", [])
        if isinstance(m.get("content"), str)
    )


class FakeChat:
    def __init__(self, config: Config) -> None:
        self.initial = config
        self.reset()

    def reset(self) -> None:
        self.config = dataclasses.replace(self.initial)
        self.log: dict[str, Any] = {
            "requests": [],
            "disconnected": [],
            "finished": {},
            "tokenize": [],
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        r = Request(scope, receive, send)
        if r.path.startswith("/_fake/"):
            return await self.control(r)
        key = self.config.api_key
        if key and r.headers.get("authorization") != f"Bearer {key}":
            return await r.json(
                401,
                self._error(
                    "Incorrect API key provided.", "invalid_api_key", 401, "AuthenticationError"
                ),
            )
        if (r.method, r.path) == ("GET", "/v1/models"):
            data = [
                {
                    "id": m,
                    "object": "model",
                    "created": 0,
                    "owned_by": "fake",
                    "max_model_len": self.config.max_model_len,
                }
                for m in self.config.models
            ]
            return await r.json(200, {"object": "list", "data": data})
        if (r.method, r.path) == ("POST", "/v1/chat/completions"):
            return await self.completions(r)
        if (r.method, r.path) == ("POST", "/tokenize") and self.config.tokenize:
            body = json.loads(await r.body())
            self.log["tokenize"].append(body)
            count = prompt_tokens(body)
            body = {"count": count, "max_model_len": self.config.max_model_len, "tokens": []}
            return await r.json(200, body)
        await r.json(404, {"detail": "Not Found"})

    async def control(self, r: Request) -> None:
        if r.path == "/_fake/log":
            return await r.json(200, self.log)
        if r.path == "/_fake/reset":
            self.reset()
            return await r.json(200, {})
        if r.path == "/_fake/config":
            for key, value in json.loads(await r.body() or b"{}").items():
                setattr(self.config, key, value)
            return await r.json(200, {})
        await r.json(404, {"detail": "Not Found"})

    @staticmethod
    def _error(message: str, code: Any, status: int, kind: str) -> dict[str, Any]:
        return {
            "error": {"message": message, "type": kind, "param": None, "code": code},
            "object": "error",
            "message": message,
        }

    async def completions(self, r: Request) -> None:
        body = json.loads(await r.body())
        self.log["requests"].append(body)
        if body.get("model") not in self.config.models:
            msg = f"The model `{body.get('model')}` does not exist."
            return await r.json(404, self._error(msg, 404, 404, "NotFoundError"))
        name = self._scenario(body.get("messages") or [])
        if name == "error_400":
            msg = "This model's maximum context length is 2048 tokens."
            return await r.json(400, self._error(msg, 400, 400, "BadRequestError"))
        if name == "error_500":
            return await r.respond(500, b"Internal Server Error", "text/plain")
        if not body.get("stream"):
            return await r.json(400, self._error("this fake only streams", 400, 400, "BadRequest"))
        await Completion(self, body, name).run(EventStream(r))

    @staticmethod
    def _scenario(messages: list[dict[str, Any]]) -> str:
        users = [m for m in messages if m.get("role") == "user"]
        content = users[-1].get("content") if users else ""
        if isinstance(content, list):
            content = " ".join(p.get("text", "") for p in content if isinstance(p, dict))
        match = _MARKER.search(content or "")
        if match and match.group(1) == "mcp_loop":
            last = max(i for i, m in enumerate(messages) if m.get("role") == "user")
            done = sum(1 for m in messages[last:] if m.get("role") == "tool")
            return f"mcp_loop_{min(done, len(_MCP_LOOP) - 1)}"
        return match.group(1) if match else "text"


class Completion:
    def __init__(self, fake: FakeChat, body: dict[str, Any], name: str) -> None:
        self.fake, self.body, self.name = fake, body, name
        self.id = f"chatcmpl-{uuid.uuid4().hex[:24]}"
        self.created = int(time.time())
        self.max_tokens = body.get("max_completion_tokens") or body.get("max_tokens")
        self.usage_on = bool((body.get("stream_options") or {}).get("include_usage"))
        self.prompt_tokens = prompt_tokens(body)
        self.tokens = 0
        self.reasoning = 0

    def logprobs(self, delta: dict[str, Any]) -> dict[str, Any] | None:
        """Chat's `choices[].logprobs` for a content token, when the request asked
        (`logprobs: true`, `top_logprobs: n`): the token, then made-up alternatives."""
        token = delta.get("content")
        if not token or not self.body.get("logprobs"):
            return None
        alternatives = [(token, -0.25), (" maybe", -1.5), (" perhaps", -2.75)]
        top = [
            {"token": t, "logprob": p, "bytes": list(t.encode())}
            for t, p in alternatives[: int(self.body.get("top_logprobs") or 0)]
        ]
        entry = {"token": token, "logprob": -0.25, "bytes": list(token.encode())}
        return {"content": [{**entry, "top_logprobs": top}], "refusal": None}

    def chunk(self, delta: dict[str, Any], finish: str | None = None) -> bytes:
        logprobs = self.logprobs(delta)
        choice = {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
        doc: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.body["model"],
            "choices": [choice],
        }
        if self.usage_on:
            doc["usage"] = None
        return json.dumps(doc).encode()

    def usage_chunk(self) -> bytes:
        usage = {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.tokens,
            "total_tokens": self.prompt_tokens + self.tokens,
            "prompt_tokens_details": {"cached_tokens": self.fake.config.cached_tokens},
            "completion_tokens_details": {"reasoning_tokens": self.reasoning},
        }
        doc = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.body["model"],
            "choices": [],
            "usage": usage,
        }
        return json.dumps(doc).encode()

    @staticmethod
    def delta(field: str, value: Any) -> dict[str, Any]:
        if field == "call":
            index, call_id, name, args = value
            fn = {"name": name, "arguments": args}
            return {
                "tool_calls": [{"index": index, "id": call_id, "type": "function", "function": fn}]
            }
        if field == "args":
            index, args = value
            return {"tool_calls": [{"index": index, "function": {"arguments": args}}]}
        return {field: value}

    async def run(self, stream: EventStream) -> None:
        await stream.start()
        log = self.fake.log
        log["finished"][self.id] = "running"
        try:
            await stream.data(self.chunk({"role": "assistant", "content": ""}))
            finish = await self._steps(stream)
            if finish is None:  # the client went away: generation stopped
                log["disconnected"].append(self.id)
                log["finished"][self.id] = "disconnected"
                return
            log["finished"][self.id] = finish
            if finish == "error":  # the body is already ended
                return
            await stream.data(self.chunk({}, finish))
            if self.usage_on and self.name != "no_usage":
                await stream.data(self.usage_chunk())
            await stream.data(b"[DONE]")
            await stream.end()
        finally:
            stream.close()

    async def _steps(self, stream: EventStream) -> str | None:
        calls = False
        for i, (field, value) in enumerate(_plan(self.name, self.fake.config)):
            await asyncio.sleep(self.fake.config.token_delay)
            if stream.gone.is_set():
                return None
            if self.max_tokens is not None and self.tokens >= self.max_tokens:
                return "length"
            if i == 3 and self.name == "drop":
                raise DropConnection
            if i == 3 and self.name == "stall":
                await stream.gone.wait()
                return None
            if i == 2 and self.name == "stream_error":
                err = self.fake._error("engine crashed", 500, 500, "InternalServerError")
                await stream.data(json.dumps(err).encode())
                await stream.data(b"[DONE]")
                await stream.end()
                return "error"
            calls = calls or field == "call"
            self.tokens += 1
            self.reasoning += field.startswith("reasoning")
            await stream.data(self.chunk(self.delta(field, value)))
        return "tool_calls" if calls else "stop"


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--api-key")
    p.add_argument("--model", action="append")
    p.add_argument("--token-delay", type=float, default=0.0)
    a = p.parse_args(argv)
    models = tuple(a.model or ["tiny-chat"])
    serve(FakeChat(Config(models=models, api_key=a.api_key, token_delay=a.token_delay)), a.port)


if __name__ == "__main__":
    main()
