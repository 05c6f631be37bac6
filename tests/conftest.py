"""Root of the test suite: makes ``tests.helpers`` importable however pytest is started (``pytest`` or
``python -m pytest``, from any directory), since ``--import-mode=importlib`` does not put the rootdir on ``sys.path``.

Markers (declared in pyproject.toml): ``slow``, ``spark``, ``postgres``; ``make test-fast`` deselects all three.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = str(Path(__file__).resolve().parents[1])
if ROOT not in sys.path:
    sys.path.insert(0, ROOT)
