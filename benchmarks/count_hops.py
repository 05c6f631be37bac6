"""Count the project functions and files a statistics post passes through, client to server and back, until a
placement is in hand. One process: the in-process server (:class:`tests.helpers.server.InProcessServer`) and the
Python client; the solver workers are other processes and not counted.

    python -m benchmarks.count_hops . new                      # this checkout
    git worktree add /tmp/old 74e43ce && python benchmarks/count_hops.py /tmp/old old   # the contract before

``old`` drives the API before the one contract (statistics by id, the automatic round solved inside the post, the
plan as an id → node map); ``new`` the API now (statistics as arrays, the round solved in the background and the
placement, an array, in the next post's answer).
"""

from __future__ import annotations

import collections
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

PACKAGES = ("api", "controller", "clients", "solvers", "cli")
KEY_GROUPS = 120


class Counter:
    """Calls of project functions on every thread of the process (the server's loop thread included)."""

    def __init__(self, root: str, server: Any):
        self.prefixes = tuple(os.path.join(root, p) + os.sep for p in PACKAGES)
        self.root, self.server = root, server
        self.calls: collections.Counter[tuple[str, str]] = collections.Counter()

    def _profile(self, frame: Any, event: str, _arg: Any) -> None:
        if event == "call" and frame.f_code.co_filename.startswith(self.prefixes):
            self.calls[(os.path.relpath(frame.f_code.co_filename, self.root), frame.f_code.co_name)] += 1

    def _set(self, fn: Any) -> None:
        async def on_loop() -> None:
            sys.setprofile(fn)

        sys.setprofile(fn)
        threading.setprofile(fn)
        self.server.run(on_loop())

    def measure(self, what: str, fn: Callable[[], Any]) -> Any:
        self.calls.clear()
        self._set(self._profile)
        try:
            return fn()
        finally:
            self._set(None)
            files = sorted({f for f, _ in self.calls})
            print(f"{what}: {len(self.calls)} distinct project functions, {sum(self.calls.values())} calls, "
                  f"{len(files)} files")
            for f in files:
                print("   ", f, sorted({fn for ff, fn in self.calls if ff == f}))


def _old(rc: Any, counter: Counter, rng: np.random.Generator, lam: np.ndarray) -> None:
    nodes = [f"p{i}" for i in range(8)]
    rc.put_job("h", nodes=nodes, operators=[{"id": "agg", "key_groups": KEY_GROUPS}], window_batches=3,
               auto={"enabled": True, "cooldown_batches": 0})
    ids = [f"agg/{k}" for k in range(KEY_GROUPS)]

    def stats(b: int) -> Any:
        loads = rng.poisson(lam)
        return rc.post_stats("h", batch_id=b, epoch=0,
                             key_groups=[{"id": i, "load": float(x)} for i, x in zip(ids, loads, strict=True)])

    stats(0)
    stats(1)

    def post() -> list[int]:
        own = {k: v for k, v in stats(2).apply.assignment.items() if k.rsplit("/", 1)[0] == "agg"}
        return [int(own[f"agg/{k}"][1:]) for k in range(KEY_GROUPS)]

    counter.measure("old: the post that solves and answers with the plan", post)


def _new(rc: Any, counter: Counter, rng: np.random.Generator, lam: np.ndarray) -> None:
    nodes = [f"p{i}" for i in range(8)]
    rc.put_job("h", {"nodes": nodes, "operators": [{"id": "agg", "key_groups": KEY_GROUPS}], "window_batches": 3,
                     "auto": True, "policy": {"cooldown_batches": 0}})

    def stats(b: int) -> Any:
        return rc.post_stats("h", batch_id=b, epoch=0, load=rng.poisson(lam).tolist())

    stats(0)
    stats(1)
    counter.measure("new: the post that starts the round", lambda: stats(2))
    while rc.get_job("h").decision.reason == "started":
        time.sleep(0.05)
    counter.measure("new: the next post, answered with the placement", lambda: stats(3).apply.placement)


def main(root: str, mode: str) -> None:
    sys.path.insert(0, root)
    os.chdir(root)
    from rebalancer_client import RebalancerClient
    from tests.helpers.server import InProcessServer

    with tempfile.TemporaryDirectory() as tmp, InProcessServer(database_url=f"sqlite:///{tmp}/hops.db",
                                                              max_time_limit_s=1.0).start() as srv:
        rc = RebalancerClient(srv.url, transport=srv.transport(), timeout=60)
        lam = np.full(KEY_GROUPS, 208.0)
        lam[:15] *= 3
        (_old if mode == "old" else _new)(rc, Counter(root, srv), np.random.default_rng(0), lam)


if __name__ == "__main__":
    main(os.path.abspath(sys.argv[1]), sys.argv[2])
