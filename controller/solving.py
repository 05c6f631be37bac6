"""Solves off the event loop: a process pool of pre-warmed workers, a cap on concurrent solves, capped time limits.

Workers are started with the ``forkserver`` method (never ``fork`` from a threaded server) and import numpy, scipy,
the registry and every available planner (OR-tools included) once, in their initializer; :meth:`SolverPool.warm`
runs one task per worker at startup so the first user request does not pay for the imports.

Everything crossing the process boundary is plain data: a :class:`~solvers.model.Problem` (numpy arrays) goes in,
a plan document or an error tuple comes out (``InvalidInput`` does not pickle with its two arguments).
"""

from __future__ import annotations

import asyncio
import concurrent.futures as cf
import importlib
import logging
import multiprocessing as mp
import os
import time
from typing import Any

from solvers.errors import InvalidInput
from solvers.model import Problem

log = logging.getLogger("rebalancer.solving")

_PRELOAD = ["numpy", "scipy.sparse", "solvers.model", "solvers.metrics", "solvers.registry"]


from controller.errors import Busy  # noqa: E402  (re-exported)


def _import_planners() -> list[str]:
    from solvers import registry

    ok = []
    for name, module in registry.PLANNER_MODULES.items():
        try:
            importlib.import_module(module)
            ok.append(name)
        except Exception:  # a planner being written may not import yet: the others still work
            pass
    return ok


def _init_worker() -> None:
    for m in _PRELOAD:
        importlib.import_module(m)
    _import_planners()


def _warm(delay: float) -> int:
    time.sleep(delay)  # keep this worker busy so the next warm task lands on another one
    return os.getpid()


def _solve_task(name: str, problem: Problem, time_limit: float, params: dict[str, Any]) -> tuple:
    """Worker side: ``registry.solve`` then ``plan_to_dict``; errors come back as data."""
    from solvers import registry
    from solvers.model import plan_to_dict

    try:
        plan = registry.solve(name, problem, time_limit=time_limit, **params)
        return ("ok", plan_to_dict(problem, plan))
    except InvalidInput as exc:
        return ("invalid", exc.field, exc.reason)
    except Exception as exc:  # a planner bug: reported, never crashes the server
        return ("error", f"{type(exc).__name__}: {exc}")


def _call_task(module: str, func: str, arg: Any) -> tuple:
    """Worker side: call ``module.func(arg)`` (used for the Gedik partitioning document)."""
    try:
        mod = importlib.import_module(module)
        return ("ok", getattr(mod, func)(arg))
    except InvalidInput as exc:
        return ("invalid", exc.field, exc.reason)
    except Exception as exc:
        return ("error", f"{type(exc).__name__}: {exc}")


class SolverPool:
    """The process pool plus admission control (``max_concurrent`` solves admitted; beyond: :class:`Busy`)."""

    def __init__(self, workers: int, max_concurrent: int, max_time_limit: float):
        self.workers = workers
        self.max_concurrent = max_concurrent
        self.max_time_limit = max_time_limit
        self.in_flight = 0
        ctx = mp.get_context("forkserver")
        try:
            ctx.set_forkserver_preload(_PRELOAD)
        except Exception:
            pass
        self._pool = cf.ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_init_worker)
        self.solves = 0
        self.solve_seconds: list[float] = []

    def cap(self, time_limit: float) -> float:
        return min(float(time_limit), self.max_time_limit)

    async def warm(self) -> None:
        """Start every worker and import the planners in it (run once at startup, in the background)."""
        loop = asyncio.get_running_loop()
        try:
            futs = [loop.run_in_executor(self._pool, _warm, 0.5) for _ in range(self.workers)]
            pids = await asyncio.gather(*futs)
            log.info("solver workers ready: %s", sorted(set(pids)))
        except Exception:  # pragma: no cover - a broken pool is reported on first use
            log.exception("warming the solver pool failed")

    async def solve(self, name: str, problem: Problem, time_limit: float, params: dict[str, Any],
                    admit: bool = True) -> dict:
        """Run a planner in a worker; returns the plan document.

        Raises:
            Busy: too many solves in flight.
            InvalidInput: invalid parameters (normally caught earlier, in the server process).
            RuntimeError: the planner failed (a bug, not user input).
        """
        res = await self.submit(_solve_task, name, problem, self.cap(time_limit), params, admit=admit)
        return res

    async def call(self, module: str, func: str, arg: Any) -> Any:
        return await self.submit(_call_task, module, func, arg)

    def check_admission(self, n: int = 1) -> None:
        """Raise :class:`Busy` when ``n`` more solves would exceed the cap."""
        if self.in_flight + n > self.max_concurrent:
            raise Busy(f"{self.in_flight} solves in flight (limit {self.max_concurrent}); retry later")

    async def submit(self, fn, *args, admit: bool = True) -> Any:  # noqa: ANN001
        if admit and self.in_flight >= self.max_concurrent:
            raise Busy(f"{self.in_flight} solves in flight (limit {self.max_concurrent}); retry later")
        self.in_flight += 1
        loop = asyncio.get_running_loop()
        t0 = time.perf_counter()
        try:
            out = await loop.run_in_executor(self._pool, fn, *args)
        except cf.process.BrokenProcessPool:
            log.error("solver pool broken; restarting it")
            self._restart()
            raise RuntimeError("the solver worker died; the pool was restarted") from None
        finally:
            self.in_flight -= 1
        self.solves += 1
        self.last_seconds = time.perf_counter() - t0
        if out[0] == "ok":
            return out[1]
        if out[0] == "invalid":
            raise InvalidInput(out[1], out[2])
        raise RuntimeError(out[1])

    def _restart(self) -> None:
        try:
            self._pool.shutdown(wait=False, cancel_futures=True)
        except Exception:
            pass
        ctx = mp.get_context("forkserver")
        self._pool = cf.ProcessPoolExecutor(max_workers=self.workers, mp_context=ctx, initializer=_init_worker)

    def shutdown(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
