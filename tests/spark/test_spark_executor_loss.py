"""An executor JVM killed mid-stream in ``local-cluster[2,1,1024]``: the cached state blocks are gone, the driver
rebuilds the state from the last committed version and the query finishes with the exact state."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.helpers.streams import write_stream

pytest.importorskip("pyspark")

pytestmark = [pytest.mark.spark, pytest.mark.slow]

JOB = Path(__file__).resolve().parent / "stream_job.py"
ROOT = JOB.parents[2]


def test_an_executor_lost_mid_stream_leaves_the_state_exact(tmp_path):
    rng = np.random.default_rng(12)
    frames = []
    for _ in range(3):  # batch 1's blocks are lost with the executor; batch 2 finds them gone
        ranks = np.minimum(rng.zipf(1.2, 500), 100)
        frames.append(pd.DataFrame({"key": [f"k{r}" for r in ranks], "v": rng.integers(0, 10, 500).astype("int64")}))
    write_stream(tmp_path / "src", frames)
    cmd = [sys.executable, str(JOB), "--src", str(tmp_path / "src"), "--chk", str(tmp_path / "chk"),
           "--out", str(tmp_path / "out"), "--result", str(tmp_path / "result.json"),
           "--master", "local-cluster[2,1,1024]", "--kill-executor-after", "1"]
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYSPARK_PYTHON=sys.executable)
    with open(tmp_path / "stderr.txt", "w") as err:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                                stderr=err)
        try:
            rc = proc.wait(900)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            raise
    assert rc == 0, (tmp_path / "stderr.txt").read_text()[-3000:]
    result = json.loads((tmp_path / "result.json").read_text())
    assert len(result["killed_executors"]) == 1
    exp = pd.concat(frames).groupby("key")["v"].agg(["size", "sum"])
    assert result["state"] == {k: [int(exp.loc[k, "size"]), int(exp.loc[k, "sum"])] for k in exp.index}
    assert result["committed"] == 2
    assert any(r["recovered"] for r in result["reports"]), "the lost blocks were not noticed"
