"""Root of the test suite: makes ``tests.helpers`` importable however pytest is started (``pytest`` or
``python -m pytest``, from any directory), since ``--import-mode=importlib`` does not put the rootdir on ``sys.path``;
and selects the Hypothesis profile.

Markers (declared in pyproject.toml): ``slow``, ``spark``, ``postgres``; ``make test-fast`` deselects all three.

Hypothesis profiles (``HYPOTHESIS_PROFILE``, default ``repeatable``): ``repeatable`` draws the same examples on every
run and machine (``derandomize``: a failure is a failure of the code, reproduced by running the test again, never
a draw that happened to come up) and measures nothing against the clock (no deadline, no "too slow" health check:
a loaded machine must not fail a test); ``explore`` draws new examples each run (to look for bugs, not for CI).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from hypothesis import HealthCheck, settings

ROOT = str(Path(__file__).resolve().parents[1])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)

_CLOCKLESS = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile("repeatable", derandomize=True, database=None, print_blob=True, **_CLOCKLESS)
settings.register_profile("explore", print_blob=True, **_CLOCKLESS)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))
