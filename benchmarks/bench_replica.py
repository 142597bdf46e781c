"""A streaming read replica of the embedded server: replay lag after a load, equality, and read throughput.

SciFact cycled to ``--chunks`` (default 100,000) with its all-MiniLM-L6-v2
vectors (384-d), 40 permission sets taking turns, top-10 (as in
``bench_tenants.py``). Steps:

1. start an embedded primary and a :class:`~labsrc.engines.StreamingReplica` of
   it (``pg_basebackup -R -X stream``, a hot standby), *then* load the corpus on
   the primary, so the load reaches the replica through the WAL stream;
2. replay lag after the load: the WAL bytes the load wrote, how many the replica
   still had to replay when the load returned, and how long that took
   (``wait_for_replay``), plus the primary's ``replay_lag``;
3. equality: on ``--check`` requests, every lane on the replica ``==`` the
   primary's (ids and scores); exits non-zero if one differs;
4. read throughput with 1, 4 and 16 client threads (``--clients``): requests/s
   and p50/p95 latency for the primary alone, the replica alone, and both
   round-robin (``engine.on_replicas(dsn, include_primary=True)``), with the
   exact dense lane, then with HNSW (``--dense``; its index is built on the
   primary, and the replica's replay of it measured as in step 2).

Both servers run on this machine, so they share its cores: a replica adds
capacity only where the primary leaves cores idle. The numbers say how much.

    python benchmarks/bench_replica.py --scifact DIR [--chunks 100000] [--requests 200] [--clients 1,4,16]
                                       [--dense exact,hnsw] [--check 40] [--json OUT]

Needs the ``postgres`` extra (``pip install 'hybrid-retrieval-lab[postgres]'``).
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import itertools  # noqa: E402
import json  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from bench_tenants import SCIFACT_TAGS, lanes_of, pct, permission_sets, scifact_corpus  # noqa: E402

from labsrc.engines import EmbeddedServer, PostgresRetriever, StreamingReplica  # noqa: E402
from labsrc.records.files import atomic_write_bytes  # noqa: E402

TOP_K = 10


def wal_lsn(dsn: str) -> str:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0]


def wal_bytes(dsn: str, start: str, end: str) -> int:
    import psycopg

    with psycopg.connect(dsn, autocommit=True) as conn:
        return int(conn.execute("SELECT pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)::bigint", (end, start)).fetchone()[0])


class CpuMeter:
    """CPU seconds this benchmark (its process and both servers' processes) used, and what the rest of the machine used.

    Other work on the machine takes cores from the servers; ``other_share`` (its CPU time over the run's
    core-seconds) says how much, so a reader can judge the requests/s.
    """

    def __init__(self, *data_directories: Path) -> None:
        import psutil

        self.psutil = psutil
        self.roots = [psutil.Process()] + [
            psutil.Process(int((d / "postmaster.pid").read_text().split()[0])) for d in data_directories
        ]
        self.seen: dict[tuple[int, float], float] = {}  # (pid, start time) -> its CPU seconds when last read

    def _own(self) -> float:
        """CPU seconds of every process seen so far: one that ended since keeps its last reading, so the
        total never goes down (a backend that ended between two readings once made a share negative)."""
        for root in self.roots:
            for proc in [root, *root.children(recursive=True)]:
                try:
                    times, started = proc.cpu_times(), proc.create_time()
                except self.psutil.Error:  # a backend that just ended
                    continue
                self.seen[(proc.pid, started)] = times.user + times.system
        return sum(self.seen.values())

    def _busy(self) -> float:
        times = self.psutil.cpu_times()
        return sum(getattr(times, name, 0.0) for name in ("user", "nice", "system", "irq", "softirq", "steal"))

    def start(self) -> None:
        self.t0, self.own0, self.busy0 = time.perf_counter(), self._own(), self._busy()

    def stop(self) -> dict[str, float]:
        wall = time.perf_counter() - self.t0
        own, busy = self._own() - self.own0, self._busy() - self.busy0
        cores = wall * (os.cpu_count() or 1)
        return {"own_share": own / cores, "other_share": max(0.0, busy - own) / cores}


def throughput(engine: Any, work: list[tuple[str, Any, Any]], clients: int, meter: CpuMeter | None = None) -> dict[str, float]:
    """``len(work)`` requests over ``clients`` threads, each taking the next request: requests/s, p50 and p95 ms."""
    turn = itertools.count()
    latencies: list[float] = []
    failures: list[BaseException] = []
    lock = threading.Lock()

    def client() -> None:
        while (i := next(turn)) < len(work):
            query, caller, day = work[i]
            t0 = time.perf_counter()
            try:
                engine.search(query, caller, day, TOP_K)
            except BaseException as exc:  # reported after the run
                failures.append(exc)
                return
            with lock:
                latencies.append(1000 * (time.perf_counter() - t0))

    threads = [threading.Thread(target=client) for _ in range(clients)]
    if meter is not None:
        meter.start()
    t0 = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    wall = time.perf_counter() - t0
    if failures:
        raise SystemExit(f"a request failed: {failures[0]}")
    run = {"rps": len(latencies) / wall, "p50_ms": pct(latencies, 50), "p95_ms": pct(latencies, 95), "requests": len(latencies)}
    return {**run, **(meter.stop() if meter is not None else {})}


def serve_and_measure(
    engine: Any, replica: StreamingReplica, work: list, args: argparse.Namespace, meter: CpuMeter
) -> dict[str, dict[str, dict[str, float]]]:
    """Check replica == primary on ``args.check`` requests, then time primary, replica and both at each client count."""
    clients = [int(c) for c in args.clients.split(",")]
    with engine.on_replicas(replica.dsn) as on_replica, engine.on_replicas(replica.dsn, include_primary=True) as spread:
        for query, caller, day in work[: args.check]:
            if lanes_of(on_replica.search(query, caller, day, TOP_K)) != lanes_of(engine.search(query, caller, day, TOP_K)):
                raise SystemExit(f"the replica's lanes differ from the primary's for {caller} on {day}: {query!r}")
        print(f"every lane on the replica == the primary's: {args.check} requests", flush=True)
        configs = {"primary": engine, "replica": on_replica, "primary+replica": spread}
        runs: dict[str, dict[str, dict[str, float]]] = {name: {} for name in configs}
        for served in configs.values():  # warm each server's caches and pools
            throughput(served, work[:10], max(clients))
        print(f"{args.requests} requests per run; requests/s, p50/p95 ms, and the share of the machine's CPU that "
              "other work used during the run")  # fmt: skip
        print(f"{'clients':>7}" + "".join(f"{name:>28}" for name in configs))  # 28 = one run's columns
        for n in clients:
            row = f"{n:>7}"
            for name, served in configs.items():
                run = throughput(served, work[: args.requests], n, meter)
                runs[name][str(n)] = run
                row += f"{run['rps']:>8.1f} {run['p50_ms']:>6.0f}/{run['p95_ms']:<6.0f} {run['other_share']:>4.0%} "
            print(row, flush=True)
    return runs


def replay_report(replica: StreamingReplica, primary_dsn: str, before: str, what: str, took_s: float) -> dict[str, float]:
    """Right after a write on the primary: its WAL bytes, and how far behind the replica was and for how long."""
    lag_s = replica.lag_s()
    replay = replica.wait_for_replay(timeout=3600)
    written = wal_bytes(primary_dsn, before, replay.lsn)
    print(f"{what} on the primary: {took_s:.1f} s, {written / 2**20:,.0f} MiB of WAL; the replica was "
          f"{replay.behind_bytes / 2**20:,.1f} MiB behind when it returned and caught up in {replay.waited_s:.2f} s "
          f"(primary's replay_lag {lag_s:.2f} s)", flush=True)  # fmt: skip
    return {"took_s": took_s, "wal_bytes": written, "behind_bytes": replay.behind_bytes, "waited_s": replay.waited_s,
            "replay_lag_s": lag_s}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scifact", metavar="DIR", required=True, help="BEIR SciFact folder with vectors/<model>/")
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--sets", type=int, default=40)
    parser.add_argument("--requests", type=int, default=200, help="requests per throughput run")
    parser.add_argument("--clients", default="1,4,16", help="client thread counts, comma-separated")
    parser.add_argument("--dense", default="exact,hnsw", help="dense indexes to serve with, comma-separated (exact, hnsw)")
    parser.add_argument("--check", type=int, default=40, help="requests compared replica == primary")
    parser.add_argument("--json", metavar="OUT", help="write the measurements as JSON")
    args = parser.parse_args()
    modes = args.dense.split(",")
    if not set(modes) <= {"exact", "hnsw"}:
        parser.error(f"--dense takes exact and/or hnsw, not {args.dense!r}")

    chunks, vectors, claims = scifact_corpus(Path(args.scifact), args.chunks)
    sets = permission_sets(args.sets, SCIFACT_TAGS)
    work = [(claims[i % len(claims)], *sets[i % len(sets)]) for i in range(max(args.requests, args.check, 10))]
    dim = vectors.document_matrix(chunks[:1]).shape[1]
    print(f"SciFact cycled to {len(chunks):,} chunks, {dim}-d vectors; {len(sets)} permission sets; top-{TOP_K}; "
          f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip

    report: dict[str, Any] = {
        "corpus": "scifact", "chunks": len(chunks), "dim": int(dim), "permission_sets": len(sets), "top_k": TOP_K,
        "cpus": os.cpu_count(), "equality_checked": args.check, "requests_per_run": args.requests,
        "replay": {}, "throughput": {}, "gain": {},
    }  # fmt: skip
    with EmbeddedServer() as primary:
        t0 = time.perf_counter()
        replica = StreamingReplica(primary)
        report["replica_start_s"] = time.perf_counter() - t0
        try:
            print(f"replica started in {report['replica_start_s']:.1f} s (pg_basebackup of the empty primary, pg_ctl start)")
            before, t0 = wal_lsn(primary.dsn), time.perf_counter()
            engine = PostgresRetriever(chunks, vectors, dsn=primary.dsn)
            report["replay"]["load"] = replay_report(replica, primary.dsn, before, "load", time.perf_counter() - t0)
            meter = CpuMeter(primary.data_directory, replica.data_directory)
            try:
                for mode in modes:
                    served = engine
                    if mode == "hnsw":
                        before, t0 = wal_lsn(primary.dsn), time.perf_counter()
                        served = engine.with_dense("hnsw", iterative_scan="relaxed_order")
                        report["replay"]["hnsw"] = replay_report(
                            replica, primary.dsn, before, "HNSW index", time.perf_counter() - t0
                        )
                    print(f"\ndense {mode}:", flush=True)
                    runs = serve_and_measure(served, replica, work, args, meter)
                    report["throughput"][mode] = runs
                    report["gain"][mode] = {n: runs["primary+replica"][n]["rps"] / runs["primary"][n]["rps"] for n in runs["primary"]}
                    print("primary+replica / primary, requests/s: "
                          + ", ".join(f"{n} clients x{g:.2f}" for n, g in report["gain"][mode].items()), flush=True)  # fmt: skip
            finally:
                engine.close()
        finally:
            replica.stop()
    if args.json:
        atomic_write_bytes(args.json, (json.dumps(report, indent=2) + "\n").encode("utf-8"))
        print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
