"""Prometheus metrics (`GET /metrics`): see prom.py."""

from adapters.metrics.prom import Metrics, route_of

__all__ = ["Metrics", "route_of"]
