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

import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script, too

from bench.harness import Table, database_arguments, median, parser, pct, serving
from tests.e2e.webhooks_kit import KEY, Receiver, add_direct, rows, webhooks


def create(base_url: str, n: int, threads: int = 8) -> list[str]:
    client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="unused", max_retries=5)

    def one(i: int) -> str:
        return client.responses.create(model="scripted", input=f"bench {i}", background=True).id

    with ThreadPoolExecutor(threads) as pool:
        return list(pool.map(one, range(n)))


def latencies(
    url: str, endpoint_id: str, receiver: Receiver, secret: str
) -> tuple[list[float], int]:
    """(seconds from each delivered event to its first POST, how many verified distinct)."""
    verify = openai.OpenAI(api_key="unused", webhook_secret=secret)
    first: dict[str, float] = {}
    for got in list(receiver.got):
        event = verify.webhooks.unwrap(got.body, got.headers)
        first.setdefault(event.data.id, got.at)
    sql = (
        f"SELECT response_id, event_at FROM webhook_deliveries WHERE endpoint_id = '{endpoint_id}'"
    )
    made = {str(r): float(str(at)) for r, at in rows(url, sql)}
    return [first[r] - at for r, at in made.items() if r in first], len(first)


def wait(receivers: list[tuple[Receiver, int]], deadline: float) -> None:
    while time.monotonic() < deadline:
        if all(len({g.headers["webhook-id"] for g in r.got}) >= n for r, n in receivers):
            return
        time.sleep(0.5)


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
    fast = Receiver().start()
    alone = Receiver().start()
    others = [Receiver().start(), Receiver().start()]
    slow = Receiver(delay_s=args.slow_s).start()
    fails_until = [float("inf")]  # set when the three endpoints are added
    failing = Receiver(answer=lambda _: 500 if time.monotonic() < fails_until[0] else 200)
    failing.start()
    flags = (
        *("--reasoning-key", KEY, "--webhook-hosts", "127.0.0.1/32"),
        *("--webhook-poll-s", str(args.poll_s)),
    )
    try:
        with serving(*flags, sqlite=args.sqlite, admin_url=args.database_url) as server:
            url = server.database_url
            # The baseline: three fast receivers.
            alone_id, alone_secret = add_direct(url, alone.url)
            gone = [add_direct(url, r.url)[0] for r in others]
            create(server.base_url, n)
            wait([(r, n) for r in (alone, *others)], time.monotonic() + args.give_up_s)
            for endpoint_id in (alone_id, *gone):
                assert webhooks("remove", endpoint_id, url=url).returncode == 0
            # The three together.
            fast_id, fast_secret = add_direct(url, fast.url)
            slow_id, slow_secret = add_direct(url, slow.url)
            failing_id, failing_secret = add_direct(url, failing.url)
            fails_until[0] = time.monotonic() + args.fail_s
            t0 = time.monotonic()
            create(server.base_url, n)
            created_s = time.monotonic() - t0
            wait([(fast, n), (slow, n), (failing, n)], time.monotonic() + args.give_up_s)
            figures = {
                "alone": latencies(url, alone_id, alone, alone_secret),
                "fast": latencies(url, fast_id, fast, fast_secret),
                "slow": latencies(url, slow_id, slow, slow_secret),
                "failing": latencies(url, failing_id, failing, failing_secret),
            }
            attempts = rows(
                url, f"SELECT count(*) FROM webhook_attempts WHERE endpoint_id = '{failing_id}'"
            )
    finally:
        for r in (fast, alone, slow, failing, *others):
            r.stop()
    kind = "SQLite" if args.sqlite else "PostgreSQL"
    table = Table(
        f"webhooks, {n} background responses ({kind}; created in {created_s:.1f} s), "
        f"slow {args.slow_s:g} s, failing {args.fail_s:g} s; "
        f"{time.monotonic() - began:.0f} s in all",
        "s",
    )
    base, _ = figures["alone"]
    for name in ("fast", "slow", "failing"):
        lat, got = figures[name]
        table.add(f"{name}: latency p50", median(lat), "among fast ones, p50", median(base))
        if name == "slow":
            table.add(f"{name}: latency p99", pct(lat, 99), "its answer time", args.slow_s)
        elif name == "failing":
            table.add(f"{name}: latency p99", pct(lat, 99), "its failing time", args.fail_s)
        else:
            table.add(f"{name}: latency p99", pct(lat, 99), "among fast ones, p99", pct(base, 99))
        table.add(f"{name}: lost", n - got, "responses", n)
    table.add("failing: attempts made", float(str(attempts[0][0])), "deliveries", n)
    table.print()


if __name__ == "__main__":
    main()
