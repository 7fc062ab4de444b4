"""Failover: how long after the PostgreSQL primary dies does `resplog serve`, given both
nodes in one multi-host URL, create responses again once the synchronous standby is
promoted, with background streams running through it.

Each round starts a private primary with a synchronous standby (never the shared server),
`serve` on `postgresql://…@primary,standby/…?target_session_attrs=read-write`, and
`--streams` background responses generating (scripted engine, 20 ms a token); then it
kills every process of the primary (SIGKILL), promotes the standby at once (`pg_ctl
promote -w`, standing in for pg_auto_failover), and creates until one succeeds. Printed
per round and as the median: kill → promoted (the baseline: the database's own part, the
floor no client can beat) and kill → first successful create; their difference is
resplog's part of the recovery. A failover tool's detection delay (pg_auto_failover's
health checks, seconds) comes on top of both and is not measured here. Exits 1 if a
stream does not complete or a create never succeeds.

    .venv/bin/python bench/failover_bench.py --rounds 5
    .venv/bin/python bench/failover_bench.py --rounds 3 --freeze
    .venv/bin/python bench/failover_bench.py --rounds 3 --freeze --statement-timeout-s 2

With `--freeze` the primary is SIGSTOPped instead (a machine that neither answers nor
refuses): the pooled connections to it then hang until `--db-statement-timeout-s`
(`--statement-timeout-s` here sets it for the server).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.e2e.cluster import replicated_postgres
from tests.e2e.conftest import start_server, stop_server

SCRIPT = {"scripted_delay_ms": "20", "scripted_tokens": "300"}
BODY = {"model": "scripted", "input": "x"}


def first_create(http: httpx.Client, since: float, limit: float = 60.0) -> float:
    while time.monotonic() - since < limit:
        try:
            if http.post("/v1/responses", json=BODY).status_code == 200:
                return time.monotonic() - since
        except httpx.TransportError:
            pass
        time.sleep(0.01)
    raise SystemExit(f"no create succeeded within {limit:.0f} s of the kill")


def one_round(
    streams: int, workdir: Path, freeze: bool, serve_flags: tuple[str, ...] = ()
) -> tuple[float, float]:
    with replicated_postgres() as (primary, standby):
        url = (
            f"postgresql://postgres@127.0.0.1:{primary.port},127.0.0.1:{standby.port}"
            "/postgres?target_session_attrs=read-write"
        )
        server = start_server(url, "postgres", workdir / "server.log", *serve_flags)
        try:
            with httpx.Client(base_url=server.base_url, timeout=60) as http:
                body = {**BODY, "background": True, "metadata": SCRIPT}
                ids = [http.post("/v1/responses", json=body).json()["id"] for _ in range(streams)]
                time.sleep(1.0)  # the streams are generating
                killed = time.monotonic()
                primary.freeze() if freeze else primary.kill()
                standby.promote()
                promoted = time.monotonic() - killed
                recovered = first_create(http, killed)
                deadline = time.monotonic() + 60
                for rid in ids:
                    while (status := http.get(f"/v1/responses/{rid}").json()["status"]) in (
                        "queued",
                        "in_progress",
                    ):
                        if time.monotonic() > deadline:
                            raise SystemExit(f"{rid} never ended")
                        time.sleep(0.1)
                    if status != "completed":  # its lease did not outlive the failover
                        raise SystemExit(f"{rid} ended {status}")
        finally:
            stop_server(server)
    return promoted, recovered


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--streams", type=int, default=8)
    parser.add_argument(
        "--freeze",
        action="store_true",
        help="SIGSTOP the primary instead of SIGKILL: its machine neither answers nor refuses",
    )
    parser.add_argument(
        "--statement-timeout-s",
        type=float,
        default=None,
        help="serve's --db-statement-timeout-s (its default, 10 s, when not given)",
    )
    args = parser.parse_args()
    flags = (
        ()
        if args.statement_timeout_s is None
        else ("--db-statement-timeout-s", str(args.statement_timeout_s))
    )
    promoted: list[float] = []
    recovered: list[float] = []
    for n in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="resplog-failover-") as tmp:
            p, r = one_round(args.streams, Path(tmp), args.freeze, flags)
        promoted.append(p)
        recovered.append(r)
        print(
            f"round {n + 1}: kill -> promoted {p * 1000:.0f} ms, kill -> first create "
            f"{r * 1000:.0f} ms"
        )
    p50, r50 = statistics.median(promoted), statistics.median(recovered)
    print(
        f"failover ({'frozen' if args.freeze else 'killed'} primary, "
        f"{args.streams} background streams running, {args.rounds} rounds, median): "
        f"kill -> first successful create {r50 * 1000:.0f} ms; "
        f"baseline kill -> standby promoted {p50 * 1000:.0f} ms; "
        f"resplog's own part {(r50 - p50) * 1000:.0f} ms"
    )


if __name__ == "__main__":
    main()
