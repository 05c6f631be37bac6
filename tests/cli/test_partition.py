"""CLI tests of ``rebalancer partition build | route | track`` (in process, :func:`tests.helpers.cli.run_cli`:
bytes in and out as through a pipe)."""

import json

import numpy as np
import pytest

from solvers.gedik import route_keys
from tests.helpers.cli import run_cli


def cli(*args, stdin=None):
    return run_cli("partition", *args, stdin=stdin, text=False)


def zipf_spec(n=8, keys=500, alg="readj"):
    h = np.sum(1.0 / np.arange(1, 10**6 + 1))
    return {"algorithm": alg, "channels": n, "previous": None,
            "frequencies": {f"k{i}": 1 / (i * h) for i in range(1, keys + 1)}, "domain_size": 10**6,
            "resources": {"state": "linear", "computation": "constant", "communication": "linear"},
            "imbalance_tolerance": 1.2, "sigma": 0.1, "utility": "APM"}


@pytest.fixture(scope="module")
def function_file(tmp_path_factory):
    d = tmp_path_factory.mktemp("part")
    spec = d / "spec.json"
    spec.write_text(json.dumps(zipf_spec()))
    r = cli("build", "--input", str(spec))
    assert r.returncode == 0, r.stderr.decode()
    doc = json.loads(r.stdout)
    f = d / "fn.json"
    f.write_text(r.stdout.decode())
    return f, doc


def test_build_prints_a_function_document(function_file):
    _, doc = function_file
    assert doc["channels"] == 8 and doc["algorithm"] == "readj"
    assert doc["explicit"] and all(0 <= c < 8 for c in doc["explicit"].values())
    m = doc["metrics"]
    assert set(m["b_k"]) == {"state", "computation", "communication"} and m["b"] > 0
    assert m["construction_seconds"] >= 0 and m["m"] is None


def test_route_answers_every_line_like_route_keys(function_file):
    f, doc = function_file
    keys = [f"k{i}" for i in range(1, 3000)] + ["", "é", "k1"]
    data = ("\n".join(keys[:-1]) + "\r\n" + keys[-1] + "\n").encode()  # CRLF line, empty key
    r = cli("route", "--function", str(f), stdin=data)
    assert r.returncode == 0, r.stderr.decode()
    got = [int(x) for x in r.stdout.decode().split("\n")[:-1]]
    assert got == route_keys(doc, keys).tolist()
    assert got[0] == doc["explicit"]["k1"]


def test_route_without_trailing_newline_and_empty_input(function_file):
    f, doc = function_file
    r = cli("route", "--function", str(f), stdin=b"k1\nk2")
    assert r.stdout.decode().split() == [str(c) for c in route_keys(doc, ["k1", "k2"]).tolist()]
    assert cli("route", "--function", str(f), stdin=b"").stdout == b""


def test_build_with_previous_through_the_cli(tmp_path, function_file):
    _, doc = function_file
    spec = zipf_spec(n=9)
    spec["previous"] = doc
    p = tmp_path / "s.json"
    p.write_text(json.dumps(spec))
    r = cli("build", "--input", str(p))
    assert r.returncode == 0
    m = json.loads(r.stdout)["metrics"]
    assert m["m"] is not None and 0 < m["m"] < 5


@pytest.mark.parametrize("patch,field", [({"algorithm": "nope"}, "algorithm"), ({"channels": 0}, "channels"),
                                         ({"sigma": 2}, "sigma")])
def test_invalid_spec_exits_2_with_one_line(tmp_path, patch, field):
    spec = zipf_spec()
    spec.update(patch)
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(spec))
    r = cli("build", "--input", str(p))
    assert r.returncode == 2 and r.stdout == b""
    err = r.stderr.decode().strip().splitlines()
    assert len(err) == 1 and field in err[0]


@pytest.mark.parametrize("patch, message", [
    ({"previous": {"channels": "3"}}, "previous.channels: must be an integer, got '3'"),
    ({"frequencies": {"k1": 1.5}}, "frequencies.k1: must be ≤ 1, got 1.5"),
    ({"channels": True}, "channels: must be an integer, got True"),
    ({"bogus": 1}, "bogus: unknown field"),
])
def test_a_bad_spec_is_refused_as_the_api_refuses_it(tmp_path, patch, message):
    """The spec file is validated by the API's contract parser: the same field path and reason as a 422."""
    p = tmp_path / "bad.json"
    p.write_text(json.dumps({**zipf_spec(), **patch}))
    r = cli("build", "--input", str(p))
    assert r.returncode == 2 and r.stdout == b""
    assert r.stderr.decode().strip() == f"rebalancer partition: error: spec file {p}: {message}"


def test_a_bad_function_file_is_refused_naming_the_field(tmp_path, function_file):
    _, doc = function_file
    p = tmp_path / "fn.json"
    p.write_text(json.dumps({**doc, "channels": "8"}))
    r = cli("route", "--function", str(p), stdin=b"a\n")
    assert r.returncode == 2 and f"function file {p}: channels: must be an integer, got '8'" in r.stderr.decode()
    p.write_text(json.dumps({**doc, "channels": 0}))  # read without its ranges, this was a ValueError's traceback
    r = cli("route", "--function", str(p), stdin=b"a\n")
    assert r.returncode == 2 and r.stderr.decode().strip().endswith("channels: must be ≥ 1, got 0")
    p.write_text(json.dumps({**doc, "channels": 2}))  # an explicit channel beyond the function's channels
    r = cli("route", "--function", str(p), stdin=b"a\n")
    assert r.returncode == 2 and "function.explicit." in r.stderr.decode()


def test_missing_function_file_exits_2(tmp_path):
    r = cli("route", "--function", str(tmp_path / "nope.json"), stdin=b"a\n")
    assert r.returncode == 2 and len(r.stderr.decode().strip().splitlines()) == 1


def test_track_reports_heavy_keys_within_epsilon(tmp_path):
    rng = np.random.default_rng(3)
    ranks = rng.zipf(1.5, 60_000)
    keys = [f"k{r}" for r in ranks]
    p = tmp_path / "keys.txt"
    p.write_text("\n".join(keys) + "\n")
    r = cli("track", "--input", str(p), "--epsilon", "0.001")
    assert r.returncode == 0, r.stderr.decode()
    doc = json.loads(r.stdout)
    u, c = np.unique(np.array(keys), return_counts=True)
    true = dict(zip(u.tolist(), (c / len(keys)).tolist(), strict=True))
    for k, f in true.items():
        if f >= 0.002:
            assert k in doc["frequencies"]
    for k, fh in doc["frequencies"].items():
        assert true[k] - 0.001 - 1e-12 <= fh <= true[k] + 1e-12
    assert doc["stream_length"] == len(keys)
    # the output feeds build
    spec = zipf_spec()
    spec["frequencies"] = doc["frequencies"]
    s = tmp_path / "spec.json"
    s.write_text(json.dumps(spec))
    assert cli("build", "--input", str(s)).returncode == 0


def test_track_sliding_window_forgets_old_keys(tmp_path):
    lines = ["old"] * 20_000 + [f"n{i % 3}" for i in range(20_000)]
    p = tmp_path / "k.txt"
    p.write_text("\n".join(lines) + "\n")
    r = cli("track", "--input", str(p), "--epsilon", "0.01", "--window", "4000")
    doc = json.loads(r.stdout)
    assert "old" not in doc["frequencies"] and set(doc["frequencies"]) == {"n0", "n1", "n2"}
    assert 4000 <= doc["counted_items"] <= 6000
