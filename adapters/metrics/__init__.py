"""Prometheus metrics (`GET /metrics`): see prom.py."""

from adapters.metrics.prom import Metrics, process_gone, route_of

__all__ = ["Metrics", "process_gone", "route_of"]
