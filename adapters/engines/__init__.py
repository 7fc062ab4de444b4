"""Generation engines: sglang's native API (gpt-oss via harmony) and any OpenAI-compatible
chat-completions upstream. See docs/engines.md."""

from adapters.engines._http import Timeouts

__all__ = ["Timeouts"]
