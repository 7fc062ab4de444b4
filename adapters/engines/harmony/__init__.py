"""gpt-oss's harmony format: offline vocabulary, prompt rendering, output parsing."""

from adapters.engines.harmony.encoding import gpt_oss_encoding, stop_token_ids
from adapters.engines.harmony.parse import HarmonyParser
from adapters.engines.harmony.render import HarmonyRenderer
from adapters.engines.harmony.vocab import ensure_vocabulary

__all__ = [
    "HarmonyParser",
    "HarmonyRenderer",
    "ensure_vocabulary",
    "gpt_oss_encoding",
    "stop_token_ids",
]
