"""kill -9 of the whole driver (Python and its JVM) at every point that matters, one after the other on the same
checkpoint — entering a batch, between a version's Parquet and its commit record, during a migration, after the
state's commit but before Spark's — the last two with the controller down, then a run to the end killed in its
clean close while it writes the last version whole: the final state equals a direct count of the input and every
batch's output exists exactly once, and a start after that kill reads the same state (the close's files without
their marker are ignored).

One query restarted six times costs six driver starts; a kill point per test cost two each."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.helpers.streams import write_stream

pytest.importorskip("pyspark")

pytestmark = [pytest.mark.spark, pytest.mark.slow]

JOB = Path(__file__).resolve().parent / "stream_job.py"
ROOT = JOB.parents[2]
BATCHES = 6
#: (kill point, controller) of each run before the last; a kill point is ``POINT:BATCH`` (tests/spark/stream_job.py)
KILLS = [("between:1", "up"), ("during-commit:2", "up"), ("migration:3", "up"), ("after-commit:4", "down")]


def _input(src: Path) -> list[pd.DataFrame]:
    rng = np.random.default_rng(11)
    frames = []
    for _ in range(BATCHES):
        ranks = np.minimum(rng.zipf(1.2, 600), 120)
        frames.append(pd.DataFrame({"key": [f"k{r}" for r in ranks], "v": rng.integers(0, 10, 600).astype("int64")}))
    write_stream(src, frames)
    return frames


def _run(tmp: Path, kill: str | None, controller: str | None, job_id: str) -> tuple[int, dict | None]:
    cmd = [sys.executable, str(JOB), "--src", str(tmp / "src"), "--chk", str(tmp / "chk"), "--out", str(tmp / "out"),
           "--result", str(tmp / "result.json"), "--job-id", job_id]
    if kill:
        cmd += ["--kill", kill]
    if controller:
        cmd += ["--controller", controller]
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYSPARK_PYTHON=sys.executable)
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                            stderr=open(tmp / f"stderr-{kill or 'final'}.txt", "w"))  # noqa: SIM115
    try:
        rc = proc.wait(600)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        raise
    result = json.loads((tmp / "result.json").read_text()) if rc == 0 else None
    return rc, result


def _check(tmp: Path, frames: list[pd.DataFrame], result: dict) -> None:
    every = pd.concat(frames)
    exp = every.groupby("key")["v"].agg(["size", "sum"])
    got = result["state"]
    assert sorted(got) == sorted(exp.index)                      # no key lost, none invented
    bad = [k for k in got if got[k] != [int(exp.loc[k, "size"]), int(exp.loc[k, "sum"])]]
    assert not bad, f"{len(bad)} keys with a wrong count, e.g. {bad[:3]}"
    dirs = sorted(p.name for p in (tmp / "out").iterdir() if not p.name.startswith("."))
    assert dirs == [f"batch_id={b}" for b in range(BATCHES)]                # no _tmp left by the kill
    out = pd.read_parquet(tmp / "out")
    for b in range(BATCHES):
        mine = out[out.batch_id.astype(int) == b].set_index("key").sort_index()
        assert mine.index.is_unique                               # the batch's output exactly once
        so_far = pd.concat(frames[:b + 1]).groupby("key")["v"].agg(["size", "sum"])
        exp_b = so_far[so_far.index.isin(frames[b].key)].sort_index()
        assert mine.index.tolist() == exp_b.index.tolist()
        assert (mine["count"].to_numpy() == exp_b["size"].to_numpy()).all()
        assert (mine["total"].to_numpy() == exp_b["sum"].to_numpy()).all()


def test_kill_9s_of_the_driver_at_every_point_then_a_restart_are_exactly_once(tmp_path, controller, unused_port):
    frames = _input(tmp_path / "src")
    job_id = "rec-" + uuid.uuid4().hex[:8]
    dead = f"http://127.0.0.1:{unused_port}"
    marker = tmp_path / "result.killed"
    for kill, ctl in KILLS:
        rc, _ = _run(tmp_path, kill, controller.url if ctl == "up" else dead, job_id)
        assert rc == -signal.SIGKILL and marker.exists(), (kill, (tmp_path / f"stderr-{kill}.txt").read_text()[-3000:])
        assert marker.read_text().startswith(kill.split(":")[0]), (kill, marker.read_text())
        marker.unlink()
    rc, _ = _run(tmp_path, "during-compaction:5", dead, job_id)       # the result is written before the close
    assert rc == -signal.SIGKILL and marker.read_text() == "during-compaction:5", (
        tmp_path / "stderr-during-compaction:5.txt").read_text()[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    _check(tmp_path, frames, result)
    ran = [r for r in result["reports"] if not r["replayed"]]
    # Spark replayed the batch whose state was committed when the driver died; it was not applied again
    assert [r["batch_id"] for r in result["reports"] if r["replayed"]] == [4]
    assert [r["batch_id"] for r in ran] == [5] and {r["controller"] for r in ran} <= {"down", "skipped"}
    assert result["committed"] == BATCHES - 1
    state = tmp_path / "chk" / "rebalancer-state"
    assert (state / f"v{BATCHES - 1:020d}" / "snapshot").exists()        # the close was cut short ...
    assert not list((state / "_commits").glob("*.snapshot"))           # ... before its marker
    (tmp_path / "result.json").unlink()
    rc, after = _run(tmp_path, None, dead, job_id)                     # no batch left: the state as loaded
    assert rc == 0, (tmp_path / "stderr-final.txt").read_text()[-3000:]
    assert after["reports"] == [] and after["committed"] == BATCHES - 1
    _check(tmp_path, frames, after)
