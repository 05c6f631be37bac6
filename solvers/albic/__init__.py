"""ALBIC (Madsen, Zhou, Cao): the load-balancing MILP (§4.3.1) and integrated collocation (§4.3.2, Algorithm 2).

- :mod:`solvers.albic.milp` — planner ``albic-milp`` and :func:`solvers.albic.milp.solve_grouped`, the MILP over
  movable units (key groups or collocated sets of key groups) used by the collocation planner.
- ``milp.units`` / ``milp.search`` / ``milp.bounds`` / ``milp.cpsat`` / ``milp.cbc`` — its building blocks.
"""
