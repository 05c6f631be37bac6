"""The small frame every benchmark script shares: options, logging, the output folder, the targets table, plots.

A benchmark is a ``main(argv)`` that measures and records; the harness does the rest the same way everywhere::

    from benchmarks.harness import Bench

    def main(argv=None):
        bench = Bench("api", __doc__)                     # results go to <out>/api.json
        bench.parser.add_argument("--seconds", type=float, default=15.0)   # the script's own options
        args = bench.parse(argv)                          # adds --quick and --out DIR (default bench-results)
        bench.log("healthz: 50 clients")                  # stderr: "[api 10:02:03] healthz: 50 clients"
        bench.result["healthz"] = {...}                   # anything JSON (no NaN: it is refused when written)
        bench.target("healthz p99 <= 10 ms", value=p99, threshold=10, holds=p99 <= 10, note="50 clients")
        with bench.figure("api_soak.png", "soak: server RSS") as fig:     # skipped without matplotlib
            ax = fig.subplots()
            ax.plot(xs, ys, label="server RSS")          # every line needs a label (checked on save)
        return bench.finish()                             # writes the JSON, logs the targets table, returns 0

What the JSON always has: ``benchmark``, ``command``, ``quick``, ``machine`` (cpus, load average at the start and
the end), ``seconds``, ``targets`` (a list of ``{target, value, threshold, holds, note}``; ``holds`` is ``None`` for a
target that does not apply, e.g. not checked in a ``--quick`` run) and ``plots`` (the PNG paths), plus the script's
``result`` keys. Plots follow three rules, enforced by :meth:`Bench.figure`: every line and reference line carries
a legend label; the figure's title says ``--quick`` when the run was reduced; nothing is clamped silently (use
:func:`plot_positive` on log axes: values below the floor are drawn at the floor with their own labelled marker).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

QUICK_NOTE = "--quick: reduced run"


def logger(name: str) -> Callable[[str], None]:
    """``log(msg)`` printing ``[<name> HH:MM:SS] msg`` to stderr (for module-level helpers of a benchmark)."""

    def log(msg: str) -> None:
        print(f"[{name} {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)

    return log


def pyplot() -> Any | None:
    """``matplotlib.pyplot`` on the Agg backend, or ``None`` (with a note on stderr) when matplotlib is missing."""
    from benchmarks.plotting import pyplot as _pyplot

    return _pyplot()


class _HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Adds ``(default: X)`` unless the help already speaks of its default or there is none to show."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        if "default" in text or action.default in (None, False, argparse.SUPPRESS):
            return text
        return text + " (default: %(default)s)"


class Bench:
    """One benchmark run: see the module docstring for the whole API."""

    def __init__(self, name: str, doc: str | None = None, keep_figures: bool = False):
        self.name = name
        #: saved figures by file name, kept open only with ``keep_figures=True`` (for tests that inspect them)
        self.figures: dict[str, Any] = {}
        self._keep = keep_figures
        self.parser = argparse.ArgumentParser(prog=f"python -m benchmarks.bench_{name}",
                                              description=(doc or "").split("\n\n")[0],
                                              formatter_class=_HelpFormatter)
        self.parser.add_argument("--quick", action="store_true", help="reduced run (a smoke test of the benchmark)")
        self.parser.add_argument("--out", default="bench-results", help="output folder (JSON and PNG)")
        self.args = argparse.Namespace(quick=False, out="bench-results")
        self.result: dict[str, Any] = {}
        self.targets: list[dict[str, Any]] = []
        self.plots: list[str] = []
        self._t0 = time.perf_counter()
        self._load0 = os.getloadavg()[0]
        self._argv: list[str] = []

    # ------------------------------------------------------------------------------------------ options, logging
    def parse(self, argv: Sequence[str] | None = None) -> argparse.Namespace:
        self._argv = list(sys.argv[1:] if argv is None else argv)
        self.args = self.parser.parse_args(self._argv)
        self.out.mkdir(parents=True, exist_ok=True)
        return self.args

    @property
    def quick(self) -> bool:
        return bool(self.args.quick)

    @property
    def out(self) -> Path:
        return Path(self.args.out)

    @property
    def json_path(self) -> Path:
        return self.out / f"{self.name}.json"

    def log(self, msg: str) -> None:
        logger(self.name)(msg)

    # ------------------------------------------------------------------------------------------ targets
    def target(self, name: str, value: Any, threshold: Any, holds: bool | None, note: str = "") -> dict[str, Any]:
        """Record one target; ``holds=None`` marks one that does not apply (left out of the count)."""
        t = target(name, value, threshold, holds, note)
        self.targets.append(t)
        return t

    def targets_table(self) -> str:
        """The targets as text, one line each: ``[ok  ]``, ``[MISS]`` or ``[n/a ]``, then a count."""
        lines = []
        for t in self.targets:
            tag = "n/a " if t["holds"] is None else ("ok  " if t["holds"] else "MISS")
            note = f" — {t['note']}" if t["note"] and t["holds"] is not True else ""
            lines.append(f"  [{tag}] {t['target']}: {t['value']} (threshold {t['threshold']}){note}")
        applicable = [t for t in self.targets if t["holds"] is not None]
        held = sum(bool(t["holds"]) for t in applicable)
        skipped = len(self.targets) - len(applicable)
        lines.append(f"targets holding: {held}/{len(applicable)} ({skipped} not applicable)")
        return "\n".join(lines)

    # ------------------------------------------------------------------------------------------ plots
    @contextmanager
    def figure(self, filename: str, title: str, **fig_kw: Any) -> Iterator[Any]:
        """A matplotlib figure saved as ``<out>/<filename>`` when the block ends (nothing when matplotlib is
        missing: the block gets ``None`` and should return early). The title gets the ``--quick`` note; a line
        without a label is an error (raised here, so the benchmark's own test catches it)."""
        plt = pyplot()
        if plt is None:
            yield None
            return
        fig = plt.figure(**fig_kw)
        try:
            yield fig
            fig.suptitle(title + (f" ({QUICK_NOTE})" if self.quick else ""), fontsize=10)
            check_labelled(fig)
            fig.tight_layout()
            path = self.out / filename
            fig.savefig(path, dpi=110)
            self.plots.append(str(path))
            if self._keep:
                self.figures[filename] = fig
        finally:
            if not self._keep:
                plt.close(fig)

    # ------------------------------------------------------------------------------------------ the end
    def finish(self) -> int:
        """Write ``<out>/<name>.json`` and log the targets table; the exit status (0: a benchmark reports misses,
        it does not fail on them)."""
        doc = {"benchmark": self.name, "command": " ".join([self.parser.prog, *self._argv]), "quick": self.quick,
               "machine": {"cpus": os.cpu_count(), "loadavg_start": round(self._load0, 2),
                           "loadavg_end": round(os.getloadavg()[0], 2)},
               "seconds": round(time.perf_counter() - self._t0, 2), **self.result,
               "targets": self.targets, "plots": self.plots}
        self.json_path.write_text(json.dumps(doc, indent=1, default=_json_default, allow_nan=False) + "\n")
        self.log(f"wrote {self.json_path} ({doc['seconds']:.0f} s)")
        if self.targets:
            self.log("targets:\n" + self.targets_table())
        return 0


@contextmanager
def scratch(prefix: str, log: Callable[[str], None] | None = None) -> Iterator[Path]:
    """A working folder for one run (databases, server logs, Spark checkpoints) under the system's temporary
    directory, removed when the block ends: a run of ``bench_spark_state`` leaves up to 140 MB. Kept when the block
    ends with an exception, and named through ``log``: its server logs are what a failure is read from."""
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    except BaseException:
        (log or logger("scratch"))(f"the run failed; its working folder is kept: {path}")
        raise
    shutil.rmtree(path, ignore_errors=True)


def target(name: str, value: Any, threshold: Any, holds: bool | None, note: str = "") -> dict[str, Any]:
    """One target line: ``{target, value, threshold, holds, note}`` (``holds=None``: does not apply)."""
    return {"target": name, "value": value, "threshold": threshold, "holds": None if holds is None else bool(holds),
            "note": note}


def _json_default(o: Any) -> Any:
    if hasattr(o, "tolist"):  # numpy scalars and arrays
        return o.tolist()
    raise TypeError(f"not JSON serialisable: {type(o).__name__}")


def check_labelled(fig: Any) -> None:
    """Every line of every axes (reference lines too) has a legend label; ValueError naming the first that has not."""
    for i, ax in enumerate(fig.axes):
        for line in ax.get_lines():
            label = line.get_label()
            if not label or label.startswith("_"):
                raise ValueError(f"{ax.get_title() or f'axes {i}'}: a line without a label "
                                 f"({len(line.get_xdata())} points); every line needs one")


def plot_positive(ax: Any, xs: Sequence[float], ys: Sequence[float], floor: float, **kw: Any) -> None:
    """Plot ``ys`` on a log axis without hiding values below ``floor``: those points are drawn AT the floor with
    a hollow downward triangle, labelled once per axes ("below <floor>, drawn at the floor")."""
    ys_f = [float(y) for y in ys]
    shown = [max(y, floor) for y in ys_f]
    (line,) = ax.plot(list(xs), shown, **kw)
    low = [(x, floor) for x, y in zip(xs, ys_f, strict=True) if y < floor]
    if low:
        first = not any(ln.get_label().startswith("below ") for ln in ax.get_lines())
        ax.plot([p[0] for p in low], [p[1] for p in low], ls="none", marker="v", mfc="none",
                ms=9 if len(low) <= 20 else 5,
                color=line.get_color(), label=f"below {floor:g}, drawn at the floor" if first else
                f"below {floor:g} ({line.get_label()})")
