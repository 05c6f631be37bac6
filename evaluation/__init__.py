"""Offline evaluation: scenario generators, simulators, paper reproductions and benchmarks."""
