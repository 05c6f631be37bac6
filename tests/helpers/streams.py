"""Input files of the tests' file-source streams, in a fixed order.

Spark's file source takes new files in order of modification time, which Hadoop's local file system reports in
milliseconds, and leaves ties in the order of the directory listing (hash order, not the names'). Small files written
one after the other often share a millisecond, so a stream with ``maxFilesPerTrigger=1`` could read them in any
order: seen once in CI, where the second file became the first batch and its watermark was above the next batch's
event times. :func:`write_stream` gives file ``i`` the
time ``base + i`` seconds, ``base`` far enough in the past that files added later (a restart's) come after them.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from pathlib import Path

import pandas as pd


def write_stream(src: Path, frames: Sequence[pd.DataFrame], name: str = "part-{:03d}.parquet") -> list[Path]:
    """Each frame as one Parquet file of ``src`` (created if needed), file ``i`` modified ``i`` seconds after the
    first."""
    src.mkdir(parents=True, exist_ok=True)
    base = time.time() - len(frames) - 60
    paths = []
    for i, frame in enumerate(frames):
        path = src / name.format(i)
        frame.to_parquet(path, index=False)
        os.utime(path, (base + i, base + i))
        paths.append(path)
    return paths
