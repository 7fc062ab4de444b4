"""The `resplog` command group (a composition root). Each module registers its commands on
`main`: `server` (migrate, serve), `worker`; admin tools live beside them, one module each."""

from adapters.cli import server as _server  # noqa: F401  (registers the commands)
from adapters.cli import worker as _worker  # noqa: F401
from adapters.cli.common import main

__all__ = ["main"]
