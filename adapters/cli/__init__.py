"""The `resplog` command group (a composition root). Each module registers its commands on
`main`: `server` (migrate, serve), `worker`, `keys` (API keys); the admin tools one module
each: `responses` (list, show), `events`, `conversation`, `conversations` (list, show),
`verify`, `archive` (export, import), `gc`, `webhooks`, `prompts` (add, list, show)."""

from adapters.cli import archive as _archive  # noqa: F401  (registers the commands)
from adapters.cli import chain as _chain  # noqa: F401
from adapters.cli import conversation as _conversation  # noqa: F401
from adapters.cli import conversations as _conversations  # noqa: F401
from adapters.cli import events as _events  # noqa: F401
from adapters.cli import gc as _gc  # noqa: F401
from adapters.cli import keys as _keys  # noqa: F401
from adapters.cli import prompts as _prompts  # noqa: F401
from adapters.cli import responses as _responses  # noqa: F401
from adapters.cli import server as _server  # noqa: F401
from adapters.cli import verify as _verify  # noqa: F401
from adapters.cli import webhooks as _webhooks  # noqa: F401
from adapters.cli import worker as _worker  # noqa: F401
from adapters.cli.common import main

__all__ = ["main"]
