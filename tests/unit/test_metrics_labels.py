"""The labels of the metrics page stay bounded whatever a request names
(adapters/metrics/prom.py): a token count is labelled with its model only when the engine
serves that model, every other name is `other`."""

from __future__ import annotations

import msgspec
from prometheus_client.parser import text_string_to_metric_families

from adapters.metrics import Metrics
from service.ports import StoredEvent


def completed(rid: str, model: str) -> StoredEvent:
    usage = {"input_tokens": 3, "output_tokens": 5}
    data = {
        "type": "response.completed",
        "response": {"status": "completed", "model": model, "usage": usage},
    }
    return StoredEvent(rid, 9, "response.completed", msgspec.json.encode(data), None, 0.0)


def token_series(metrics: Metrics) -> dict[tuple[str, str], float]:
    page = metrics.exposition().decode()
    return {
        (s.labels["model"], s.labels["kind"]): s.value
        for family in text_string_to_metric_families(page)
        for s in family.samples
        if s.name == "resplog_tokens_total"
    }


def test_a_model_the_engine_does_not_serve_is_counted_as_other() -> None:
    metrics = Metrics()
    metrics.watch(lambda: 0, lambda: 0, lambda: ["scripted"])
    names = ["scripted", *(f"made-up-{i}" for i in range(50))]
    metrics.flushed([completed(f"resp_{i}", n) for i, n in enumerate(names)], 0.01, 0, 0)
    assert token_series(metrics) == {
        ("scripted", "input"): 3,
        ("scripted", "output"): 5,
        ("other", "input"): 150,
        ("other", "output"): 250,
    }


def test_before_the_engine_is_known_every_model_is_other() -> None:
    metrics = Metrics()
    metrics.flushed([completed("resp_1", "scripted")], 0.01, 0, 0)
    assert set(token_series(metrics)) == {("other", "input"), ("other", "output")}
