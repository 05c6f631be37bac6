"""A job whose windowed numbers overflow as a problem (a tiny capacity under large loads) is refused clearly when
planned: 409 with the field and reason, never a 500, a NaN plan or a proposal that fails inside a solver."""

from __future__ import annotations

import httpx

from controller.service import Controller
from tests.api.inproc import run


def test_a_window_that_overflows_is_refused_with_its_reason(tmp_path):
    async def scenario(c: httpx.AsyncClient, _ctl: Controller) -> httpx.Response:
        body = {"nodes": [{"id": "w0", "capacity": 1e-300}, {"id": "w1"}],
                "key_groups": [{"id": "a", "node": "w0"}, {"id": "b", "node": "w1"}],
                "algorithm": "albic-milp", "window_batches": 1}
        assert (await c.put("/v1/jobs/tiny", json=body)).status_code == 201
        kgs = [{"id": "a", "load": 1e10}, {"id": "b", "load": 1.0}]
        assert (await c.post("/v1/jobs/tiny/stats", json={"batch_id": 1, "epoch": 0, "key_groups": kgs})
                ).status_code == 202
        return await c.post("/v1/jobs/tiny/proposals", json={})

    r = run(tmp_path / "o.db", scenario)
    assert r.status_code == 409, r.text
    assert "cannot be planned from its window" in r.json()["detail"] and "capacity" in r.json()["detail"]
