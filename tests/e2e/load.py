"""Load test of `codemode serve --http`: N concurrent MCP sessions running trivial cells (issue "speed").

Usage: load.py CODEMODE_BIN [--sessions 1,2,8,64] [--seconds 5] [--procs P] [--console off|on|both] [--json]
       (run by `make bench-serve` and `make bench-console`, after scripts/setup.sh; numbers are
       printed, never asserted)

For each N of --sessions:
  1. start one `codemode serve --http 127.0.0.1:0 --demo-tools` (a fresh process per N: the demo
     catalog, the contract's defaults, runs kept in memory) and read its address from stderr;
  2. open N streamable-HTTP sessions with Python's official MCP client (`mcp`), spread over up to P
     worker processes (default: the CPU count), so that one Python event loop is not the bottleneck;
  3. once every session is open, each calls `exec {"code": "return 1+1"}` back to back for --seconds.
Reported per N: completed cells per second (all sessions together), p50 and p99 latency of one
`exec` call in ms (as the client sees it, HTTP included), errors (an exception, `isError`, a status
other than `completed` or a value other than 2), and the server's CPU use over the window (100% = one
core). The clients share the machine with the server: read the numbers as the whole system's.

--console on: the server also serves the operator console (`--console`); the load logs in as the
`local` operator (its token is read from stderr) and keeps one live-update client connected to
`/console/api/events` for the whole window, reading every tick. `both` measures each N with the
console off, then on, and prints the ratio (the console's cost on serving).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import threading
import time
import re
import urllib.request
from contextlib import AsyncExitStack

from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from client import bound_url

CELL = {"code": "return 1+1"}
CALL_TIMEOUT_S = 30.0


# -- the server --------------------------------------------------------------------------------------


class Server:
    """`codemode serve --http 127.0.0.1:0 --demo-tools`; its stderr is drained so logging never blocks it."""

    def __init__(self, bin_path: str, console: bool = False):
        self.proc = subprocess.Popen(
            [bin_path, "serve", "--demo-tools", "--http", "127.0.0.1:0", *(["--console"] if console else [])],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "RUST_LOG": "warn"},
        )
        self.url = bound_url(self.proc)
        if not self.url:
            self.proc.kill()
            raise SystemExit("codemode serve --http did not report its address")
        self.ticks = 0
        if console:
            token = None
            for line in self.proc.stderr:
                m = re.search(r'operator "local", token (\w+)', line)
                if m:
                    token = m.group(1)
                    break
            if not token:
                self.proc.kill()
                raise SystemExit("codemode serve --console did not print the local operator's token")
            self.listen(token)
        threading.Thread(target=lambda: [None for _ in self.proc.stderr], daemon=True).start()

    def listen(self, token: str) -> None:
        """Logs in as `local` and keeps one live-update (SSE) client reading ticks in a thread."""
        base = self.url.rsplit("/mcp", 1)[0]
        login = urllib.request.Request(
            base + "/console/api/login",
            data=json.dumps({"name": "local", "token": token}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(login, timeout=10) as r:
            cookie = r.headers["Set-Cookie"].split(";", 1)[0]
        events = urllib.request.Request(base + "/console/api/events", headers={"Cookie": cookie})
        stream = urllib.request.urlopen(events, timeout=60)

        def read() -> None:
            try:
                for line in stream:
                    if line.startswith(b"event: tick"):
                        self.ticks += 1
            except OSError:
                pass

        threading.Thread(target=read, daemon=True).start()

    def cpu_seconds(self) -> float | None:
        """User + system CPU time of the server so far (Linux /proc), or None."""
        try:
            fields = open(f"/proc/{self.proc.pid}/stat").read().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return None

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# -- one worker process: `count` sessions ------------------------------------------------------------


def ok(result) -> bool:
    sc = result.structured_content or {}
    return not result.is_error and sc.get("status") == "completed" and sc.get("value") == 2


async def drive(session: ClientSession, end: float, out: dict) -> None:
    while time.perf_counter() < end:
        t0 = time.perf_counter()
        try:
            good = ok(await session.call_tool("exec", CELL, read_timeout_seconds=CALL_TIMEOUT_S))
        except Exception as e:  # noqa: BLE001 - any failure is an error to count
            good = False
            out["first_error"] = out["first_error"] or repr(e)
        if good:
            out["latencies_ms"].append((time.perf_counter() - t0) * 1e3)
        else:
            out["errors"] += 1


async def run_sessions(url: str, count: int, seconds: float, ready, go) -> dict:
    out = {"latencies_ms": [], "errors": 0, "first_error": None, "elapsed_s": 0.0}
    async with AsyncExitStack() as stack:
        sessions = []
        for _ in range(count):
            read, write = await stack.enter_async_context(streamable_http_client(url))
            s = await stack.enter_async_context(ClientSession(read, write))
            await s.initialize()
            sessions.append(s)
        ready.put(count)
        await asyncio.to_thread(go.wait)
        t0 = time.perf_counter()
        await asyncio.gather(*(drive(s, t0 + seconds, out) for s in sessions))
        out["elapsed_s"] = time.perf_counter() - t0
    return out


def worker(url: str, count: int, seconds: float, ready, go, results) -> None:
    # The server answers the closing DELETE with 202, which this client logs as a warning per session.
    logging.getLogger("mcp.client.streamable_http").setLevel(logging.ERROR)
    try:
        results.put(asyncio.run(run_sessions(url, count, seconds, ready, go)))
    except BaseException as e:  # noqa: BLE001 - reported to the parent instead of hanging it
        ready.put(0)
        results.put({"latencies_ms": [], "errors": count, "first_error": repr(e), "elapsed_s": 0.0})


# -- one N -------------------------------------------------------------------------------------------


def percentile(sorted_ms: list[float], q: float) -> float | None:
    if not sorted_ms:
        return None
    return sorted_ms[round((len(sorted_ms) - 1) * q)]


def measure(bin_path: str, n: int, seconds: float, procs: int, console: bool = False) -> dict:
    server = Server(bin_path, console)
    ctx = mp.get_context("spawn")
    ready, go, results = ctx.Queue(), ctx.Event(), ctx.Queue()
    shares = [n // procs + (1 if i < n % procs else 0) for i in range(min(n, procs))]
    workers = [ctx.Process(target=worker, args=(server.url, k, seconds, ready, go, results)) for k in shares]
    try:
        for w in workers:
            w.start()
        for _ in workers:
            ready.get(timeout=120)
        cpu0, wall0 = server.cpu_seconds(), time.perf_counter()
        go.set()
        parts = [results.get(timeout=seconds + 120) for _ in workers]
        cpu1, wall1 = server.cpu_seconds(), time.perf_counter()
        for w in workers:
            w.join(timeout=30)
    finally:
        for w in workers:
            if w.is_alive():
                w.kill()
        server.stop()

    lat = sorted(x for p in parts for x in p["latencies_ms"])
    elapsed = max(p["elapsed_s"] for p in parts) or seconds
    cpu = None if cpu0 is None or cpu1 is None else round(100 * (cpu1 - cpu0) / (wall1 - wall0), 1)
    rnd = lambda x: None if x is None else round(x, 2)  # noqa: E731
    return {
        "console": console,
        "ticks": server.ticks,
        "sessions": n,
        "client_procs": len(workers),
        "seconds": round(elapsed, 3),
        "cells": len(lat),
        "cells_per_s": round(len(lat) / elapsed, 1),
        "p50_ms": rnd(percentile(lat, 0.5)),
        "p99_ms": rnd(percentile(lat, 0.99)),
        "mean_ms": rnd(statistics.fmean(lat) if lat else None),
        "errors": sum(p["errors"] for p in parts),
        "first_error": next((p["first_error"] for p in parts if p["first_error"]), None),
        "server_cpu_pct": cpu,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("bin", help="the codemode binary")
    ap.add_argument("--sessions", default="1,2,8,64", help="comma-separated session counts (default 1,2,8,64)")
    ap.add_argument("--seconds", type=float, default=5.0, help="measured window per N (default 5)")
    ap.add_argument("--procs", type=int, default=os.cpu_count() or 1, help="client worker processes (default: CPUs)")
    ap.add_argument("--console", choices=("off", "on", "both"), default="off",
                    help="serve the operator console with one live-update client (default off)")
    ap.add_argument("--json", action="store_true", help="print JSON instead of a table")
    args = ap.parse_args()
    counts = [int(x) for x in args.sessions.split(",") if x.strip()]
    modes = {"off": [False], "on": [True], "both": [False, True]}[args.console]

    rows = []
    for n in counts:
        for console in modes:
            label = " (console on, 1 live client)" if console else ""
            print(f"[load] {n} session(s), {args.seconds:g} s{label}", file=sys.stderr)
            rows.append(measure(args.bin, n, args.seconds, max(1, args.procs), console))

    if args.json:
        print(json.dumps({"cell": CELL["code"], "cpus": os.cpu_count(), "rows": rows}, indent=2))
        return
    print(f"codemode serve --http — `{CELL['code']}` back to back per session, {args.seconds:g} s per row, "
          f"{os.cpu_count()} CPUs shared by server and clients")
    head = ("sessions", "console", "cells/s", "p50 (ms)", "p99 (ms)", "errors", "server CPU %", "cells", "ticks")
    print("".join(f"{h:>14}" for h in head))
    show = lambda x: "-" if x is None else x  # noqa: E731
    for r in rows:
        cols = (r["sessions"], "on" if r["console"] else "off", r["cells_per_s"], r["p50_ms"], r["p99_ms"],
                r["errors"], r["server_cpu_pct"], r["cells"], r["ticks"] if r["console"] else "-")
        print("".join(f"{show(c):>14}" for c in cols))
    if len(modes) == 2:
        for off, on in zip(rows[0::2], rows[1::2]):
            if off["cells_per_s"]:
                cost = 100 * (1 - on["cells_per_s"] / off["cells_per_s"])
                print(f"console cost at {off['sessions']} session(s): {cost:+.1f}% cells/s "
                      f"(p50 {off['p50_ms']} -> {on['p50_ms']} ms)")
    print("(server CPU far below 100% x CPUs means the clients, not the server, set the pace)")
    for r in rows:
        if r["first_error"]:
            print(f"first error with {r['sessions']} session(s): {r['first_error']}")


if __name__ == "__main__":
    main()
