"""The metrics registry (prometheus_client): counter names and types, function-backed series, per-job series."""

from __future__ import annotations

from types import SimpleNamespace

from prometheus_client.parser import text_string_to_metric_families

from controller.telemetry import JobSample, Telemetry


def families(t: Telemetry) -> dict[str, tuple[str, list[tuple[str, dict[str, str], float]]]]:
    return {f.name: (f.type, [(s.name, s.labels, s.value) for s in f.samples])
            for f in text_string_to_metric_families(t.render())}


def test_counters_histograms_gauges_and_jobs() -> None:
    t = Telemetry(process=False)
    t.requests.inc("GET", "/healthz", "200")
    t.requests.inc("GET", "/healthz", "200")
    t.latency.observe(0.003, "/healthz")
    t.plans.inc("flux", "heuristic")
    t.gauge("rebalancer_jobs", "registered jobs", lambda: 2)
    t.gauge("rebalancer_db_commits", "group commits", lambda: 7)  # cumulative: exposed as a counter
    t.job_samples = lambda: [JobSample("a", 3, 10, 4, 0.25), JobSample("b", 0, 5, 0, None)]
    t.record_epoch("a", "execute", 6)
    t.record_epoch("a", "auto", 2)
    f = families(t)
    assert f["rebalancer_requests"][0] == "counter"
    assert ("rebalancer_requests_total", {"method": "GET", "route": "/healthz", "status": "200"}, 2.0) in \
        f["rebalancer_requests"][1]
    assert f["rebalancer_request_seconds"][0] == "histogram"
    assert f["rebalancer_jobs"] == ("gauge", [("rebalancer_jobs", {}, 2.0)])
    assert f["rebalancer_db_commits"] == ("counter", [("rebalancer_db_commits_total", {}, 7.0)])
    assert ("rebalancer_epochs_total", {"kind": "execute"}, 1.0) in f["rebalancer_epochs"][1]
    assert f["rebalancer_job_epoch"][1] == [("rebalancer_job_epoch", {"job": "a"}, 3.0),
                                            ("rebalancer_job_epoch", {"job": "b"}, 0.0)]
    assert f["rebalancer_job_load_distance"][1] == [("rebalancer_job_load_distance", {"job": "a"}, 0.25)]
    assert f["rebalancer_job_migrations"] == ("counter", [("rebalancer_job_migrations_total", {"job": "a"}, 8.0)])
    assert not any(name.endswith("_created") for _, samples in f.values() for name, _, _ in samples)


def test_job_sampler_reads_the_controllers_jobs_and_caches() -> None:
    import numpy as np

    from controller.telemetry import job_sampler
    from solvers.model import Problem

    calls = [0]

    def problem() -> Problem:
        calls[0] += 1
        return Problem.from_dict({"nodes": [{"id": "x"}, {"id": "y"}],
                                  "key_groups": [{"id": "k1", "node": "x", "load": 3}, {"id": "k2", "node": "x",
                                                                                       "load": 1}]})

    job = SimpleNamespace(epoch=1, nodes=[1, 2], kg_ids=["k1", "k2"], problem=problem,
                          window=SimpleNamespace(batches={7: None}))
    sample = job_sampler(lambda: {"j": job})
    first = list(sample())
    assert first[0].job_id == "j" and first[0].load_distance is not None and first[0].load_distance > 0
    list(sample())
    assert calls[0] == 1  # unchanged job: not recomputed
    job.epoch = 2
    list(sample())
    assert calls[0] == 2
    assert np.isfinite(first[0].load_distance)


def test_event_loop_lag_is_observed_when_a_callback_blocks_the_loop() -> None:
    """``watch_loop`` sees a callback that holds the loop 0.3 s: one sample of at least ~0.25 s, the others small."""
    import asyncio
    import time

    from controller.telemetry import watch_loop

    t = Telemetry(process=False)

    async def main() -> None:
        watcher = asyncio.create_task(watch_loop(t.loop_lag, period=0.02))
        await asyncio.sleep(0.1)
        time.sleep(0.3)  # a blocking callback
        await asyncio.sleep(0.1)
        watcher.cancel()

    asyncio.run(main())
    samples = {name: value for name, _, value in families(t)["rebalancer_event_loop_lag_seconds"][1]
               if name != "rebalancer_event_loop_lag_seconds_bucket"}
    buckets = {labels["le"]: value for name, labels, value in families(t)["rebalancer_event_loop_lag_seconds"][1]
               if name == "rebalancer_event_loop_lag_seconds_bucket"}
    assert samples["rebalancer_event_loop_lag_seconds_count"] >= 5
    assert samples["rebalancer_event_loop_lag_seconds_sum"] >= 0.25
    # the blocked sample lies above 0.25 s (a loaded machine can only add lag: no upper bound is asserted)
    assert samples["rebalancer_event_loop_lag_seconds_count"] - buckets["0.25"] >= 1
