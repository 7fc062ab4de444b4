"""The WebSocket connection protocol `serve` runs: uvicorn's (the `websockets` library's
sans-I/O protocol), except at shutdown.

uvicorn closes every open socket at once when it stops, with 1012, and a response streaming
on it ends as a dropped client's (cancelled), where an SSE stream gets the grace period to
end. Here a socket the app has accepted is left to the app at shutdown: the connection
drains (adapters/http/sockets.py: what it accepted runs to its end, then it closes with
1001), and only one still open `grace_s` and a second later is closed as uvicorn would.
"""

from __future__ import annotations

from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol

_LATE_S = 1.0  # past the grace: the app had its chance to close the socket itself


class DrainingWebSocketProtocol(WebSocketsSansIOProtocol):
    grace_s = 0.0  # a subclass's, made by `draining_protocol`

    def shutdown(self) -> None:
        if self.handshake_complete and self.initial_response is None and not self.close_sent:
            self.loop.call_later(self.grace_s + _LATE_S, self._shutdown_late)
            return
        super().shutdown()

    def _shutdown_late(self) -> None:
        if not self.disconnected:
            super().shutdown()


def draining_protocol(grace_s: float) -> type[DrainingWebSocketProtocol]:
    """The protocol class for a server whose grace period is `grace_s`."""
    return type("DrainingWebSocketProtocol", (DrainingWebSocketProtocol,), {"grace_s": grace_s})
