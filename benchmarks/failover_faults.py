"""The faults' machinery of :mod:`benchmarks.bench_failover`: a throwaway PostgreSQL cluster and, per replica, a
TCP proxy to the database in a process of its own, which can cut that replica off the database and restore it."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.helpers.server import HOST, free_port


@contextmanager
def postgres(base: Path) -> Iterator[str]:
    """A throwaway PostgreSQL cluster (initdb as ``postgres`` when running as root); its URL."""
    bins = sorted(Path("/usr/lib/postgresql").glob("*/bin"))
    initdb = shutil.which("initdb") or str(bins[-1] / "initdb")
    pg_ctl = shutil.which("pg_ctl") or str(bins[-1] / "pg_ctl")
    prefix = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    data = base / "pg"
    data.mkdir()
    if prefix:
        shutil.chown(base, "postgres")
        shutil.chown(data, "postgres")
    port = free_port()
    subprocess.run([*prefix, initdb, "-D", str(data), "-A", "trust", "-U", "rebalancer", "--no-sync"], check=True,
                   capture_output=True)
    opts = f"-p {port} -k {data} -c listen_addresses=127.0.0.1 -c max_connections=200"
    subprocess.run([*prefix, pg_ctl, "-D", str(data), "-o", opts, "-l", str(data / "log"), "-w", "start"],
                   check=True, capture_output=True)
    try:
        yield f"postgresql://rebalancer@127.0.0.1:{port}/postgres"
    finally:
        subprocess.run([*prefix, pg_ctl, "-D", str(data), "-m", "immediate", "stop"], capture_output=True)


def serve_proxies(target_port: int, ports: list[int]) -> None:
    """The proxies' process: TCP proxies from ``ports`` to the database; reads ``cut I`` / ``restore I`` lines on
    stdin (a cut proxy closes its connections and refuses new ones) and answers ``ok`` on stdout."""
    import sys

    cut_off = [False] * len(ports)
    conns: list[set[asyncio.StreamWriter]] = [set() for _ in ports]

    async def pipe(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        try:
            while data := await r.read(65536):
                w.write(data)
                await w.drain()
        except OSError:
            pass
        finally:
            w.close()

    def handler(i: int) -> Any:
        async def handle(cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
            if cut_off[i]:
                cw.transport.abort()
                return
            try:
                sr, sw = await asyncio.open_connection(HOST, target_port)
            except OSError:
                cw.transport.abort()
                return
            conns[i].update((cw, sw))
            await asyncio.gather(pipe(cr, sw), pipe(sr, cw))
            conns[i].difference_update((cw, sw))
        return handle

    async def main() -> None:
        for i, port in enumerate(ports):
            await asyncio.start_server(handler(i), HOST, port)
        loop = asyncio.get_running_loop()
        print("ok", flush=True)
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            what, i = line.split()
            cut_off[int(i)] = what == "cut"
            if what == "cut":
                for w in list(conns[int(i)]):
                    w.transport.abort()
            print("ok", flush=True)

    asyncio.run(main())


class Proxies:
    """A TCP proxy to the database per replica, in a process of their own (the benchmark's threads do not slow
    the replicas' database traffic down); :meth:`cut` closes one proxy's connections and makes it refuse new ones
    until :meth:`restore`."""

    def __init__(self, target_port: int, n: int):
        import sys

        self.ports = [free_port() for _ in range(n)]
        code = f"from benchmarks.failover_faults import serve_proxies; serve_proxies({target_port}, {self.ports})"
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, cwd=Path(__file__).resolve().parents[1])
        self._ok()

    def _ok(self) -> None:
        assert self.proc.stdout is not None
        if self.proc.stdout.readline().strip() != "ok":
            raise RuntimeError("the database proxies did not start")

    def _say(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        self._ok()

    def cut(self, i: int) -> None:
        self._say(f"cut {i}")

    def restore(self, i: int) -> None:
        self._say(f"restore {i}")

    def stop(self) -> None:
        self.proc.kill()
        self.proc.wait(10)

