"""Failover: how soon creates succeed again once the primary dies and a standby is promoted.

`resplog serve` is given both nodes in one multi-host URL, with background streams
running through it.

Each round: a private primary with a synchronous standby (never the shared server),
`serve` on `postgresql://…@primary,standby/…?target_session_attrs=read-write` with
`--streams` background responses generating (scripted engine, 20 ms a token); every
process of the primary SIGKILLed (`--freeze`: SIGSTOPped, a machine that neither answers
nor refuses), the standby promoted at once (`pg_ctl promote -w`, standing in for
pg_auto_failover), creates until one succeeds. Prints kill -> first successful create
beside the baseline kill -> promoted (the database's own part, the floor no client beats),
medians of the rounds; a failover tool's detection delay comes on top of both. Exits 1 if
a stream does not complete or a create never succeeds.

    .venv/bin/python bench/failover_bench.py --rounds 5
    .venv/bin/python bench/failover_bench.py --rounds 3 --freeze --statement-timeout-s 2
    .venv/bin/python bench/failover_bench.py --rounds 1 --streams 2
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script, too

from bench.harness import Table, median, parser, workdir
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
    p = parser(__doc__)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--streams", type=int, default=8)
    p.add_argument(
        "--freeze",
        action="store_true",
        help="SIGSTOP the primary instead of SIGKILL: its machine neither answers nor refuses",
    )
    p.add_argument(
        "--statement-timeout-s",
        type=float,
        default=None,
        help="serve's --db-statement-timeout-s (its default, 10 s, when not given)",
    )
    args = p.parse_args()
    flags = (
        ()
        if args.statement_timeout_s is None
        else ("--db-statement-timeout-s", str(args.statement_timeout_s))
    )
    promoted: list[float] = []
    recovered: list[float] = []
    for n in range(args.rounds):
        with workdir() as tmp:
            up, back = one_round(args.streams, tmp, args.freeze, flags)
        promoted.append(up)
        recovered.append(back)
        print(
            f"round {n + 1}: kill -> promoted {up * 1000:.0f} ms, kill -> first create "
            f"{back * 1000:.0f} ms"
        )
    how = "frozen" if args.freeze else "killed"
    table = Table(f"{how} primary, {args.streams} streams running, medians of {args.rounds}", "ms")
    table.add(
        "kill -> first successful create",
        median(recovered) * 1e3,
        "kill -> standby promoted",
        median(promoted) * 1e3,
    )
    table.add("resplog's own part", (median(recovered) - median(promoted)) * 1e3)
    table.print()


if __name__ == "__main__":
    main()
