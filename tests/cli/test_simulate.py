"""``rebalancer simulate`` end to end (in process, :func:`tests.helpers.cli.run_cli`): the JSON document, the
options, clean errors."""

import json

import pytest

from tests.helpers.cli import run_cli


def rb(*args):
    return run_cli("simulate", *args)


def error_line(r):
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    assert "Traceback" not in r.stderr
    assert r.stdout == ""
    return r.stderr.strip().splitlines()[-1]


def test_simulate_json_document():
    r = rb("--grouping", "pkg", "--workers", "10", "--sources", "5", "--stream", "zipf", "--zipf", "1.2",
           "--keys", "2000", "--messages", "50000", "--seed", "1", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)  # stdout holds the document and nothing else
    for key in ("imbalance", "imbalance_normalized", "replication", "worker_loads", "messages", "seconds",
                "latency", "throughput_at_saturation", "queue_length_spread", "utilisation_spread"):
        assert key in doc
    assert doc["messages"] == 50_000 and sum(doc["worker_loads"]) == 50_000
    assert len(doc["worker_loads"]) == 10
    assert 1.0 < doc["replication"] <= 2.0  # PKG: at most two workers per key
    assert "series" not in doc
    # same seed, same result; KG has replication exactly 1
    again = json.loads(rb("--grouping", "pkg", "--workers", "10", "--zipf", "1.2", "--keys", "2000",
                          "--messages", "50000", "--seed", "1", "--json").stdout)
    assert again["worker_loads"] == doc["worker_loads"]
    kg = json.loads(rb("--grouping", "kg", "--workers", "10", "--keys", "2000", "--messages", "20000",
                       "--json").stdout)
    assert kg["replication"] == 1.0


def test_simulate_capacities_params_series_and_streams(tmp_path):
    r = rb("--grouping", "chbl", "--workers", "4", "--capacities", "2*2", "1,1", "--param", "eps=0.3",
           "--messages", "20000", "--series", "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["capacities"] == [2.0, 2.0, 1.0, 1.0]
    assert doc["params"] == {"eps": 0.3}
    assert doc["imbalance_normalized"] <= 0.3 + 4 / 20000
    assert len(doc["series"]["imbalance"]) == len(doc["series"]["time"]) > 0
    keys = tmp_path / "keys.txt"
    keys.write_text("\n".join(["hot"] * 50 + [f"k{i}" for i in range(50)]))
    r = rb("--grouping", "kg", "--workers", "3", "--stream", "file", "--keys-file", str(keys), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["messages"] == 100 and doc["keys_seen"] == 51
    r = rb("--grouping", "dkg", "--workers", "10", "--stream", "skewed", "--hot-share", "0.7", "--keys", "204",
           "--messages", "30000")
    assert r.returncode == 0, r.stderr
    assert "imbalance" in r.stdout and "replication" in r.stdout


@pytest.mark.parametrize("args,needle", [
    (["--grouping", "pkg", "--workers", "4", "--capacities", "1", "1"], "capacities"),
    (["--grouping", "pkg", "--workers", "4", "--param", "eps=0.1"], "params.eps"),
    (["--grouping", "chbl", "--workers", "4", "--param", "eps=abc"], "params.eps"),
    (["--grouping", "kg", "--workers", "4", "--stream", "file"], "--keys-file"),
    (["--grouping", "kg", "--workers", "4", "--stream", "file", "--keys-file", "/nonexistent/x"], "not found"),
    (["--grouping", "kg", "--workers", "4", "--stream", "skewed", "--hot-share", "1.5"], "hot-share"),
])
def test_simulate_errors_are_one_line(args, needle):
    assert needle in error_line(rb(*args))


def test_simulate_argparse_rejects_bad_values():
    r = rb("--grouping", "nope", "--workers", "4")
    assert r.returncode == 2 and "Traceback" not in r.stderr
    r = rb("--grouping", "kg", "--workers", "0")
    assert r.returncode == 2 and "Traceback" not in r.stderr
