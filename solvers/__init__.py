"""Pure algorithms on numpy arrays: the problem model, metrics, planners, partitioning functions, groupings.

Nothing here does I/O or knows about HTTP (see docs/design.md).
"""
