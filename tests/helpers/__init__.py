"""Test helpers shared by the test suites and the benchmarks (``tests.helpers.server``: starting a controller)."""
