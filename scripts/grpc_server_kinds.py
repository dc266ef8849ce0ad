"""What one unary gRPC call costs a Python server, by kind of server: grpcio's thread-pool server (the
nodes'), grpc.aio with the same synchronous handlers (run in its migration pool), and grpc.aio with async
handlers. An echo of 100 bytes, no protobuf, a server process of its own, rounds alternated; printed per
kind: calls/s and the server's CPU per call (from /proc), each as a ratio to the thread-pool server of the
same round. docs/benchmarks.md ("Session 18") has a run and why the nodes stay on the thread-pool server.

    .venv/bin/python scripts/grpc_server_kinds.py [--rounds 3] [--seconds 3]
"""
from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc

from txnsim.bench.proc_stats import process_cpu_s

KINDS = ("thread-pool", "aio, sync handlers", "aio, async handlers")
PAYLOAD = b"x" * 100


def _echo(request: bytes, context: Any) -> bytes:
    return request


async def _echo_async(request: bytes, context: Any) -> bytes:
    return request


def _handlers(handler: Any) -> grpc.GenericRpcHandler:
    return grpc.method_handlers_generic_handler("bench.Echo", {"Call": grpc.unary_unary_rpc_method_handler(handler)})


def _serve(kind: str, port: int, ready: Any) -> None:
    if kind == "thread-pool":
        server = grpc.server(ThreadPoolExecutor(max_workers=32))
        server.add_generic_rpc_handlers((_handlers(_echo),))
        server.add_insecure_port(f"127.0.0.1:{port}")
        server.start()
        ready.set()
        server.wait_for_termination()
        return

    async def main() -> None:
        if kind == "aio, sync handlers":
            aio = grpc.aio.server(migration_thread_pool=ThreadPoolExecutor(max_workers=32))
            aio.add_generic_rpc_handlers((_handlers(_echo),))
        else:
            aio = grpc.aio.server()
            aio.add_generic_rpc_handlers((_handlers(_echo_async),))
        aio.add_insecure_port(f"127.0.0.1:{port}")
        await aio.start()
        ready.set()
        await aio.wait_for_termination()
    asyncio.run(main())


def _calls(port: int, threads: int, seconds: float) -> int:
    """Blocking calls from `threads` client threads for `seconds`: how many were answered."""
    call = grpc.insecure_channel(f"127.0.0.1:{port}").unary_unary("/bench.Echo/Call")
    call(PAYLOAD)  # connected before the clock starts
    stop = time.monotonic() + seconds
    counts = [0] * threads

    def loop(i: int) -> None:
        while time.monotonic() < stop:
            call(PAYLOAD)
            counts[i] += 1
    workers = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    return sum(counts)


def measure(kind: str, threads: int, seconds: float, port: int) -> tuple[float, float]:
    """(calls/s, server CPU µs per call) of one run."""
    ready = mp.Event()
    server = mp.Process(target=_serve, args=(kind, port, ready), daemon=True)
    server.start()
    if not ready.wait(30):
        raise SystemExit(f"the {kind} server did not start")
    try:
        cpu0, t0 = process_cpu_s(server.pid), time.monotonic()  # type: ignore[arg-type]
        n = _calls(port, threads, seconds)
        elapsed, cpu = time.monotonic() - t0, process_cpu_s(server.pid) - cpu0  # type: ignore[arg-type]
    finally:
        server.kill()
        server.join()
    return n / elapsed, cpu / n * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    port = 50_700
    ratios: dict[tuple[str, int], list[tuple[float, float]]] = {}
    for rnd in range(args.rounds):
        for threads in (1, 8):
            base: tuple[float, float] | None = None
            for kind in KINDS:
                port += 1
                rate, cpu_us = measure(kind, threads, args.seconds, port)
                print(f"round {rnd + 1}, {threads} client thread(s), {kind}: {rate:,.0f} calls/s, "
                      f"server {cpu_us:.0f} µs CPU per call", flush=True)
                base = base or (rate, cpu_us)
                ratios.setdefault((kind, threads), []).append((rate / base[0], cpu_us / base[1]))
    print("\nmedian ratio to the thread-pool server of the same round (calls/s, server CPU per call):")
    for (kind, threads), pairs in ratios.items():
        print(f"  {threads} client thread(s), {kind}: {statistics.median(p[0] for p in pairs):.2f}, "
              f"{statistics.median(p[1] for p in pairs):.2f}")


if __name__ == "__main__":
    main()
