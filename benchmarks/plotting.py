"""The one way benchmarks get matplotlib: the non-interactive Agg backend, and no crash when it is missing."""

from __future__ import annotations

import sys
from typing import Any


def pyplot() -> Any | None:
    """``matplotlib.pyplot`` on the Agg backend, or ``None`` (with a note on stderr) when matplotlib is missing.

    Plots are optional: a benchmark writes its JSON either way (matplotlib comes with the ``dev`` and ``plots``
    extras)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plots (pip install 'rebalancer-server[plots]')", file=sys.stderr)
        return None
    return plt
