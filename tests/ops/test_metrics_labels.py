"""``/metrics`` labels requests by what they were: the API documentation's static files under their mount (not
``route="unmatched"``), an upload the client aborted as ``status="499"`` (not a server error, ``500``)."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.helpers.server import HOST, ThreadServer


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ThreadServer]:
    db = tmp_path_factory.mktemp("metrics") / "m.db"
    with ThreadServer(f"sqlite:///{db}") as srv:
        yield srv


def requests_total(url: str) -> dict[tuple[str, str, str], float]:
    text = httpx.get(url + "/metrics", timeout=10).text
    out = {}
    for family in text_string_to_metric_families(text):
        if family.name == "rebalancer_requests":
            for sample in family.samples:
                if sample.name.endswith("_total"):
                    labels = sample.labels
                    out[(labels["method"], labels["route"], labels["status"])] = sample.value
    return out


def counted(url: str, key: tuple[str, str, str], timeout: float = 20.0) -> dict[tuple[str, str, str], float]:
    """The counters once ``key`` has been counted: a request is counted when its answer has been sent, which may be
    just after the client has read it."""
    deadline = time.monotonic() + timeout
    counts = requests_total(url)
    while key not in counts and time.monotonic() < deadline:
        time.sleep(0.05)
        counts = requests_total(url)
    return counts


def test_static_documentation_files_count_under_their_mount(server: ThreadServer) -> None:
    r = httpx.get(server.url + "/docs-assets/swagger-ui.css", timeout=10)
    assert r.status_code == 200, r.status_code
    counts = counted(server.url, ("GET", "/docs-assets/{path}", "200"))
    assert counts.get(("GET", "/docs-assets/{path}", "200")) == 1, counts
    assert not [k for k in counts if k[1] == "unmatched"], counts
    httpx.get(server.url + "/no/such/route", timeout=10)
    assert counted(server.url, ("GET", "unmatched", "404")).get(("GET", "unmatched", "404")) == 1


def aborted(counts: dict[tuple[str, str, str], float]) -> float:
    return sum(v for (method, _, status), v in counts.items() if method == "POST" and status == "499")


@pytest.mark.parametrize("declared,sent", [(100_000, 30), (8_000_000, 2_000_000)], ids=["small", "large"])
def test_an_aborted_upload_is_not_a_server_error(server: ThreadServer, declared: int, sent: int) -> None:
    before = aborted(requests_total(server.url))
    with socket.create_connection((HOST, server.port), timeout=10) as s:
        s.sendall(b"POST /v1/plans HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n" % declared + b'{"problem": {"nodes": [' + b" " * sent)
        time.sleep(0.3)
    deadline = time.monotonic() + 20
    counts = requests_total(server.url)
    while aborted(counts) == before and time.monotonic() < deadline:
        time.sleep(0.2)
        counts = requests_total(server.url)
    assert aborted(counts) == before + 1, counts
    assert not [k for k in counts if k[0] == "POST" and k[2] in ("500", "422")], counts
    if declared < 1024 * 1024:  # answered by the route (a large body may be handled before routing)
        assert counts.get(("POST", "/v1/plans", "499")) == 1, counts
