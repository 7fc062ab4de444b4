"""Every HTTP route is admitted by the app's `before_request` (adapters/http/auth.py): litestar
takes the nearest layer's `before_request`, so a route that set one of its own would replace
admission, and serve its `/v1` path to anyone."""

from __future__ import annotations

import warnings

from litestar.exceptions import LitestarDeprecationWarning
from litestar.routes import HTTPRoute

from adapters.http.app import create_app
from service.settings import Settings


def test_every_http_route_runs_the_apps_admission() -> None:
    with warnings.catch_warnings():  # litestar's notes on parameter style, as when serving
        warnings.simplefilter("ignore", LitestarDeprecationWarning)
        app = create_app(Settings())
    handlers = [h for r in app.routes if isinstance(r, HTTPRoute) for h in r.route_handlers]
    assert len(handlers) > 20
    admissions = {h.resolve_before_request() for h in handlers}
    assert len(admissions) == 1
    [admit] = admissions
    assert admit is not None and admit.__qualname__ == "admission.<locals>.admit"
