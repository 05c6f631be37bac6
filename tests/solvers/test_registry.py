"""The registry: one interface, names listed, parameters validated, unknown ones rejected."""

import numpy as np
import pytest

from solvers import registry
from solvers.errors import InvalidInput
from solvers.model import Plan, Problem


def tiny():
    return Problem.from_arrays([3.0, 1.0], [0, 0], [1.0, 1.0])


def test_unknown_algorithm():
    with pytest.raises(InvalidInput) as info:
        registry.solve("nope", tiny())
    assert info.value.field == "algorithm" and "flux" in info.value.reason


def test_unknown_parameter():
    with pytest.raises(InvalidInput) as info:
        registry.solve("flux", tiny(), banana=3)
    assert info.value.field == "params.banana"


def test_param_coercion_and_ranges():
    p = registry.Param("x", int, 3, minimum=1)
    assert p.coerce("4") == 4
    with pytest.raises(InvalidInput):
        p.coerce("0")
    with pytest.raises(InvalidInput):
        p.coerce("2.5")
    b = registry.Param("flag", bool, False)
    assert b.coerce("true") is True
    with pytest.raises(InvalidInput):
        b.coerce("maybe")
    c = registry.Param("backend", str, "cpsat", choices=("cpsat", "cbc"))
    with pytest.raises(InvalidInput, match="one of"):
        c.coerce("gurobi")


def test_registry_rejects_a_plan_that_breaks_the_budget(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))  # keep the test planner out of the rest

    @registry.register("_bad_for_test", "moves everything")
    def bad(problem, *, time_limit):
        return Plan("_bad_for_test", np.full(problem.n_key_groups, 1))

    p = Problem.from_arrays([3.0, 1.0], [0, 0], [1.0, 1.0], max_migrations=1)
    with pytest.raises(RuntimeError, match="budget"):
        registry.solve("_bad_for_test", p)


def test_flux_is_listed():
    assert "flux" in registry.available_names()
    assert registry.get("flux").describe()["name"] == "flux"


def test_a_planner_module_that_does_not_import_is_an_error_not_a_missing_planner(monkeypatch):
    # registry.get once swallowed the ModuleNotFoundError of a planner's own module ("not built yet")
    monkeypatch.setitem(registry.PLANNER_MODULES, "ghost", "solvers.ghost_planner_that_does_not_exist")
    with pytest.raises(ModuleNotFoundError):
        registry.get("ghost")


def test_time_limit_in_params_names_the_right_place():
    # the time limit is listed with every planner but is not a planner parameter
    with pytest.raises(InvalidInput) as info:
        registry.get("flux").validate({"time_limit": 5})
    assert info.value.field == "params.time_limit" and "time_limit_s" in info.value.reason


def test_a_plan_that_breaks_its_problem_is_a_planner_error():
    # planner bugs are a PlannerError (a ServerError: 500 with a request id), not a bare RuntimeError
    from solvers.errors import PlannerError

    p = tiny()
    with pytest.raises(PlannerError):
        registry.check_plan(p, Plan(algorithm="x", assignment=np.array([0, 5])))
