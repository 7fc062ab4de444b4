"""The `resplog` command group (a composition root). Each module registers its commands on
`main`: `server` (migrate, serve), `keys` (API keys); admin tools live beside it, one module
each."""

from adapters.cli import keys as _keys  # noqa: F401  (registers the commands)
from adapters.cli import server as _server  # noqa: F401  (registers the commands)
from adapters.cli.common import main

__all__ = ["main"]
