"""The engine adapters stay inside their lane: no GPU stack, no web framework, no store."""

from __future__ import annotations

import subprocess
import sys

FORBIDDEN = ["sglang", "torch", "litestar", "sqlalchemy", "adapters.store", "adapters.http"]


def test_importing_the_engines_loads_no_gpu_stack_web_framework_or_store() -> None:
    code = (
        "import sys\n"
        "import adapters.engines.sglang, adapters.engines.openai_chat, adapters.engines.harmony\n"
        f"print([m for m in {FORBIDDEN!r} if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
