"""``rebalancer what-if``: what-if scaling offline gives the document ``POST /v1/what-if/scaling`` gives for the same
problem, candidates and goal (the same engine, :mod:`solvers.scaling`); bad candidates are one line, exit 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.helpers.cli import run_cli
from tests.helpers.server import InProcessServer

PROBLEM = {"nodes": [{"id": "w0"}, {"id": "w1"}, {"id": "w2"}, {"id": "w3"}],
           "key_groups": [{"id": "a", "node": "w0", "load": 30}, {"id": "b", "node": "w0", "load": 20},
                          {"id": "c", "node": "w1", "load": 10}, {"id": "d", "node": "w2", "load": 15},
                          {"id": "e", "node": "w3", "load": 5}, {"id": "f", "node": "w3", "load": 5}],
           "budget": {"max_migrations": 1}}
CANDIDATES: list[Any] = [2, 3, 6, {"add": ["x"], "remove": ["w3"]}]


def without_timings(doc: Any) -> Any:
    """The document without solve times, and without the fields that are null (a typed contract may write an
    absent lower bound as null where the planner's document leaves it out)."""
    if isinstance(doc, dict):
        return {k: without_timings(v) for k, v in doc.items() if k != "seconds" and v is not None}
    if isinstance(doc, list):
        return [without_timings(v) for v in doc]
    return doc


def test_what_if_offline_equals_the_endpoint(tmp_path: Path) -> None:
    (tmp_path / "p.json").write_text(json.dumps(PROBLEM))
    r = run_cli("what-if", "--input", str(tmp_path / "p.json"), "--candidates", *map(json.dumps, CANDIDATES),
                "--target", "10", "--algorithm", "flux")
    assert r.returncode == 0, r.stderr
    offline = json.loads(r.stdout)
    with InProcessServer(database_url=f"sqlite:///{tmp_path}/db.sqlite") as srv, srv.client() as c:
        answer = c.post("/v1/what-if/scaling", json={"problem": PROBLEM, "candidates": CANDIDATES,
                                                      "target_load_distance": 10, "algorithm": "flux"})
    assert answer.status_code == 200, answer.text
    assert without_timings(offline) == without_timings(answer.json())
    assert offline["recommendation"] == 0 and [c["meets_target"] for c in offline["candidates"]][:2] == [True, True]


@pytest.mark.parametrize("candidate,needle", [
    ("0", "candidates[0]: cluster size must be ≥ 1"),
    ("true", "--candidates: expected a node count or a JSON object"),
    ('{"remove": ["nope"]}', "candidates[0]"),
])
def test_bad_candidates_are_one_line(tmp_path: Path, candidate: str, needle: str) -> None:
    (tmp_path / "p.json").write_text(json.dumps(PROBLEM))
    r = run_cli("what-if", "--input", str(tmp_path / "p.json"), "--candidates", candidate, "--algorithm", "flux")
    assert r.returncode == 2
    assert needle in r.stderr.strip().splitlines()[-1], r.stderr
