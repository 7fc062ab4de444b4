"""Webhooks: delivery latency after the terminal event, per receiver, and the count lost.

`--responses` background responses (scripted engine) on a fresh PostgreSQL database (or
`--sqlite`), whose owner has three endpoints: a fast receiver, one that answers after
`--slow-s` (2 s), and one that fails (HTTP 500) for the first `--fail-s` (60 s) of the run,
then recovers. Each receiver is a real HTTP server; every delivery is verified with
openai-python's `client.webhooks.unwrap`. A delivery's latency is from its response's
terminal event (the commit that made the delivery, `webhook_deliveries.event_at`) to the
first POST of it the receiver got; lost is what never came. Baselines, from the same run:
three fast receivers (the same number of responses, the same number of deliveries, before
the slow and the failing ones replace two of them), the slow receiver's own answer time,
the failing one's failing time. The server runs with its
defaults (`--webhook-backoff-s 5`, `--webhook-concurrency 16`) but `--webhook-poll-s`.

    .venv/bin/python bench/webhooks_bench.py                              # docs/performance.md
    .venv/bin/python bench/webhooks_bench.py --responses 200 --fail-s 10  # a quick run
"""

from __future__ import annotations

import json
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script, too

from bench.harness import Table, database_arguments, median, parser, pct, serving
from tests.e2e.webhooks_kit import KEY, Received, Receiver, add_direct, rows, webhooks


def create(base_url: str, n: int, threads: int = 8) -> list[str]:
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=5)

    def one(i: int) -> str:
        return client.responses.create(model="scripted", input=f"bench {i}", background=True).id

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(one, range(n)))


class Verifying:
    """A receiver's answers: each POST verified with openai-python's `unwrap` as it comes
    (its timestamp is checked against now), the first accepted one of each response kept."""

    def __init__(self, fails_until: float = 0.0) -> None:
        self.secret = ""
        self.fails_until = fails_until
        self.accepted: dict[str, float] = {}
        self.refused = 0
        self._client = openai.OpenAI(api_key="unused")  # unwrap needs no connection

    def answer(self, got: Received) -> int:
        try:
            self._client.webhooks.unwrap(got.body, got.headers, secret=self.secret)
        except openai.InvalidWebhookSignatureError:
            self.refused += 1
            return 400
        if time.monotonic() < self.fails_until:
            return 500
        self.accepted.setdefault(json.loads(got.body)["data"]["id"], got.at)
        return 200


def latencies(url: str, endpoint_id: str, verifying: Verifying) -> list[float]:
    """Seconds from each delivery's terminal event to the first accepted POST of it."""
    sql = (
        f"SELECT response_id, event_at FROM webhook_deliveries WHERE endpoint_id = '{endpoint_id}'"
    )
    made = {str(r): float(str(at)) for r, at in rows(url, sql)}
    return [verifying.accepted[r] - at for r, at in made.items() if r in verifying.accepted]


def wait(verifying: list[Verifying], n: int, deadline: float) -> None:
    while time.monotonic() < deadline and any(len(v.accepted) < n for v in verifying):
        time.sleep(0.5)


def endpoint(url: str, v: Verifying, **receiver: float) -> tuple[Receiver, str]:
    r = Receiver(answer=v.answer, **receiver).start()  # type: ignore[arg-type]
    endpoint_id, v.secret = add_direct(url, r.url)
    return r, endpoint_id


def main() -> None:
    p = parser(__doc__)
    database_arguments(p)
    p.add_argument("--responses", type=int, default=1000)
    p.add_argument("--slow-s", type=float, default=2.0)
    p.add_argument("--fail-s", type=float, default=60.0)
    p.add_argument("--poll-s", type=float, default=0.25, help="the server's --webhook-poll-s")
    p.add_argument("--give-up-s", type=float, default=600.0, help="stop waiting after this")
    args = p.parse_args()
    n = args.responses
    began = time.monotonic()
    flags = (
        *("--reasoning-key", KEY, "--webhook-hosts", "127.0.0.1/32"),
        *("--webhook-poll-s", str(args.poll_s)),
    )
    receivers: list[Receiver] = []
    try:
        with serving(*flags, sqlite=args.sqlite, admin_url=args.database_url) as server:
            url = server.database_url
            # The baseline: three fast receivers.
            three = [Verifying() for _ in range(3)]
            made = [endpoint(url, v) for v in three]
            receivers += [r for r, _ in made]
            create(server.base_url, n)
            wait(three, n, time.monotonic() + args.give_up_s)
            base = latencies(url, made[0][1], three[0])
            for _, endpoint_id in made:
                assert webhooks("remove", endpoint_id, url=url).returncode == 0
            # Fast, slow and failing.
            fast, slow, failing = Verifying(), Verifying(), Verifying()
            made = [
                endpoint(url, fast),
                endpoint(url, slow, delay_s=args.slow_s),
                endpoint(url, failing),
            ]
            receivers += [r for r, _ in made]
            failing.fails_until = time.monotonic() + args.fail_s
            t0 = time.monotonic()
            create(server.base_url, n)
            created_s = time.monotonic() - t0
            wait([fast, slow, failing], n, time.monotonic() + args.give_up_s)
            figures = {
                name: latencies(url, endpoint_id, v)
                for name, v, (_, endpoint_id) in zip(
                    ("fast", "slow", "failing"), (fast, slow, failing), made, strict=True
                )
            }
            got = {"fast": len(fast.accepted), "slow": len(slow.accepted)}
            got["failing"] = len(failing.accepted)
            failing_id = made[2][1]
            attempts = rows(
                url, f"SELECT count(*) FROM webhook_attempts WHERE endpoint_id = '{failing_id}'"
            )
            refused = sum(v.refused for v in (*three, fast, slow, failing))
    finally:
        for r in receivers:
            r.stop()
    kind = "SQLite" if args.sqlite else "PostgreSQL"
    table = Table(
        f"webhooks, {n} background responses ({kind}; created in {created_s:.1f} s), "
        f"slow {args.slow_s:g} s, failing {args.fail_s:g} s; "
        f"{time.monotonic() - began:.0f} s in all",
        "s",
    )
    for name in ("fast", "slow", "failing"):
        lat = figures[name]
        table.add(f"{name}: latency p50", median(lat), "among fast ones, p50", median(base))
        if name == "slow":
            table.add(f"{name}: latency p99", pct(lat, 99), "its answer time", args.slow_s)
        elif name == "failing":
            table.add(f"{name}: latency p99", pct(lat, 99), "its failing time", args.fail_s)
        else:
            table.add(f"{name}: latency p99", pct(lat, 99), "among fast ones, p99", pct(base, 99))
        table.add(f"{name}: lost", n - got[name], "responses", n)
    table.add("signatures refused", refused)
    table.add("failing: attempts made", float(str(attempts[0][0])), "deliveries", n)
    table.print()


if __name__ == "__main__":
    main()
