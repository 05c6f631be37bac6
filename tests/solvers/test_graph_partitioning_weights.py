"""METIS with target part weights (node capacities): pymetis gets fractions that sum to one, so it neither warns
("tpwghts does not sum to one … will stop working in 2027") nor has to repair them, and the parts follow them."""

from __future__ import annotations

import warnings

import numpy as np
import scipy.sparse as sp

from solvers.graph_partitioning import metis_parts


def test_target_weights_raise_no_warning_and_are_followed() -> None:
    rng = np.random.default_rng(0)
    v = 300
    rows = rng.integers(0, v, 1200)
    cols = rng.integers(0, v, 1200)
    adj = sp.coo_matrix((np.ones(1200), (rows, cols)), shape=(v, v)).tocsr()
    adj = ((adj + adj.T) > 0).astype(np.float64).tocsr()
    adj.setdiag(0)
    adj.eliminate_zeros()
    weights = np.ones(v)
    capacities = np.array([3.0, 1.0, 1.0, 1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        parts = metis_parts(adj, 4, weights, tpwgts=capacities)
    share = np.bincount(parts, minlength=4) / v
    assert abs(share[0] - 0.5) < 0.05 and all(abs(s - 1 / 6) < 0.05 for s in share[1:]), share
