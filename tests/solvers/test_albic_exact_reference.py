"""The exact reference (:mod:`tests.solvers.albic_exact_reference`) against brute force on tiny instances whose
loads, rates and bytes reach 10^12 (an earlier CP-SAT model of it reported optima above the brute-force optimum,
e.g. 13,333,336.7 for 3,333,330.03).

Every answer must be certified: ``lo ≤ OPT ≤ hi`` exactly, and ``hi`` (what :func:`exact_optimum` returns) within
10^-9 of the mean utilisation of the brute-force optimum.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from solvers.model import Problem
from tests.solvers.albic_exact_reference import brute_force_optimum, optimum_interval, random_tiny_problem


def check(p: Problem) -> bool:
    """Assert the reference's certificate against brute force; True when it was found without presolve."""
    opt = brute_force_optimum(p)
    cert = optimum_interval(p, work=30.0)
    assert cert is not None, "the reference proved nothing on a tiny instance"
    assert cert.lo <= opt <= cert.hi, (float(cert.lo), float(opt), float(cert.hi))
    t = Fraction(float(p.load.sum())) / Fraction(float(p.capacity[p.active].sum()))
    assert cert.hi - opt <= Fraction(1, 10**9) * max(t, Fraction(1, 10**12)), (float(cert.hi), float(opt))
    return not cert.presolve


@pytest.mark.parametrize("start", range(0, 240, 60))
def test_reference_agrees_with_brute_force_up_to_1e12(start):
    for seed in range(start, start + 60):
        check(random_tiny_problem(np.random.default_rng(seed)))

# more instances: the oracle section of benchmarks/bench_albic_milp.py


def test_large_decimal_loads_are_exact():
    # loads with two decimals near 10^6 and a capacity of 1.5: the common denominator is too large for exact
    # integers within 2^40, so the rows are rounded and the answer certified
    p = Problem.from_arrays([3333330.03, 1e7 + 0.07, 2.5e6, 1234567.89], [0, 0, 1, 1], [1.0, 1.5, 2.0],
                            max_migrations=2)
    cert = optimum_interval(p)
    assert cert is not None and cert.lo <= brute_force_optimum(p) <= cert.hi
