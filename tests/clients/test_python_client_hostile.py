"""RebalancerClient against hostile or broken servers: real sockets, real HTTP.

A small scripted HTTP/1.1 server answers each request with raw bytes chosen by the test — dripped one byte at a time,
malformed JSON documents, odd headers, huge bodies, dropped connections — and records the requests it got. The
client must stay within its deadline and raise a ``RebalancerError`` subclass for every failure.
"""

from __future__ import annotations

import json
import socket
import threading
import time
import uuid
from collections.abc import Callable

import pytest

from rebalancer_client import (
    ControllerUnavailable,
    NotFoundError,
    RebalancerClient,
    RebalancerError,
    ServerError,
)

Respond = Callable[[int, str, str, socket.socket], None]


class Scripted:
    """A real TCP server; request ``n`` (0-based) ``METHOD target`` is answered by ``respond(n, method, target,
    conn)``, which writes raw bytes. Every connection is closed after one answer."""

    def __init__(self, respond: Respond):
        self.respond = respond
        self.requests: list[str] = []
        self.stopping = threading.Event()
        self._sock = socket.create_server(("127.0.0.1", 0))
        self._sock.settimeout(0.2)
        self.url = f"http://127.0.0.1:{self._sock.getsockname()[1]}"
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self.stopping.is_set():
            try:
                conn, _ = self._sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(5)
            data = b""
            try:
                while b"\r\n\r\n" not in data:
                    chunk = conn.recv(65536)
                    if not chunk:
                        return
                    data += chunk
                head, _, rest = data.partition(b"\r\n\r\n")
                lines = head.decode("latin-1").split("\r\n")
                length = next((int(v) for k, _, v in (ln.partition(":") for ln in lines[1:])
                               if k.strip().lower() == "content-length"), 0)
                while len(rest) < length:
                    rest += conn.recv(65536)
                method, target, _ = lines[0].split(" ", 2)
                n = len(self.requests)
                self.requests.append(f"{method} {target}")
                self.respond(n, method, target, conn)
            except OSError:
                pass

    def close(self) -> None:
        self.stopping.set()
        try:
            self._sock.shutdown(socket.SHUT_RDWR)  # wakes the accept now (not after its 0.2 s timeout)
        except OSError:
            pass
        self._thread.join(2)
        self._sock.close()


@pytest.fixture
def scripted():
    servers: list[Scripted] = []

    def make(respond: Respond) -> Scripted:
        servers.append(Scripted(respond))
        return servers[-1]

    yield make
    for s in servers:
        s.close()


def raw_response(status: int, body: bytes, headers: dict[str, str] | None = None) -> bytes:
    hdrs = {"Content-Type": "application/json", "Content-Length": str(len(body)), "Connection": "close",
            **(headers or {})}
    return (f"HTTP/1.1 {status} X\r\n" + "".join(f"{k}: {v}\r\n" for k, v in hdrs.items()) + "\r\n").encode() + body


def reply(status: int, body: bytes | object, headers: dict[str, str] | None = None) -> Respond:
    data = body if isinstance(body, bytes) else json.dumps(body).encode()

    def respond(n: int, method: str, target: str, conn: socket.socket) -> None:
        conn.sendall(raw_response(status, data, headers))
    return respond


def drip(payload: bytes, every: float, server_stop: list[threading.Event]) -> Respond:
    def respond(n: int, method: str, target: str, conn: socket.socket) -> None:
        for i in range(len(payload)):
            if server_stop and server_stop[0].is_set():
                return
            conn.sendall(payload[i:i + 1])
            time.sleep(every)
    return respond


JOB = {"job_id": "j", "epoch": 3, "nodes": [{"id": "p0", "capacity": 1.0, "removing": False, "key_groups": 1}],
       "key_groups": ["k"], "placement": [0], "algorithm": "flux", "params": {}, "budget": {}, "window_batches": 1,
       "communication_cost": 0.0, "time_limit_s": 1.0, "auto": False, "policy": {},
       "window": {"size": 1, "batches": [], "covered_batches": 0, "coverage": 0.0, "key_groups_covered": 0,
                  "key_groups": 1, "ready": False},
       "metrics": None, "decision": None, "created_at": 0.0, "updated_at": 0.0}


# ---------------------------------------------------------------- deadlines
@pytest.mark.parametrize("where", ["headers", "body"])
@pytest.mark.parametrize("call", ["get_job", "execute_proposal"])
def test_a_dripping_server_cannot_hold_a_call_past_its_deadline(scripted, where, call):
    stop: list[threading.Event] = []
    body = json.dumps(JOB).encode()
    full = raw_response(200, body)
    cut = full.index(b"\r\n\r\n") + 4
    # headers: every byte dripped; body: the headers at once, then the body a byte every 0.1 s (> 20 s in all)
    server = scripted(drip(full, 0.1, stop) if where == "headers" else (
        lambda n, m, t, conn: (conn.sendall(full[:cut]), drip(full[cut:], 0.1, stop)(n, m, t, conn))))
    stop.append(server.stopping)
    rc = RebalancerClient(server.url, timeout=1.0, retries=0)
    t0 = time.monotonic()
    with pytest.raises(ControllerUnavailable):
        if call == "get_job":
            rc.get_job("j")
        else:
            rc.execute_proposal("j", "p1")
    assert time.monotonic() - t0 < 2.0


def test_retries_stay_within_the_total_deadline(scripted):
    stop: list[threading.Event] = []
    server = scripted(drip(raw_response(200, json.dumps(JOB).encode()), 0.1, stop))
    stop.append(server.stopping)
    rc = RebalancerClient(server.url, timeout=0.8, retries=10, backoff=0.01, deadline=2.0)
    t0 = time.monotonic()
    with pytest.raises(ControllerUnavailable):
        rc.get_job("j")
    assert time.monotonic() - t0 < 3.0
    assert 2 <= len(server.requests) <= 4  # retried (GET is idempotent), but only while the deadline allowed


def test_a_long_retry_after_is_not_slept_past_the_deadline(scripted):
    server = scripted(reply(503, {"detail": "busy"}, {"Retry-After": "3600"}))
    rc = RebalancerClient(server.url, timeout=1, retries=3, max_backoff=30, deadline=1.5)
    t0 = time.monotonic()
    with pytest.raises(ServerError):
        rc.get_job("j")
    assert time.monotonic() - t0 < 1.5 and len(server.requests) == 1


# ---------------------------------------------------------------- malformed answers
MALFORMED = [b"[]", b'"x"', b"null", b"", b"<html>busy</html>", b"[" * 100_000, b"{}",
             b'{"id": null, "status": "pending", "base_epoch": 0}', b'{"id": "p1", "status": "pending"}',
             b'{"id": "../../healthz", "status": "pending", "base_epoch": 0}',
             json.dumps({**JOB, "epoch": "3"}).encode(), json.dumps({**JOB, "epoch": True}).encode(),
             json.dumps({**JOB, "nodes": None}).encode(), json.dumps({**JOB, "placement": [None]}).encode(),
             json.dumps({**JOB, "key_groups": [0]}).encode(), json.dumps({**JOB, "policy": {"min_gain": "x"}}).encode(),
             json.dumps({**JOB, "window": []}).encode(), b'{"epoch": NaN}', b'{"new_epoch": 4}']
CALLS = {
    "get_job": lambda rc: rc.get_job("j"),
    "put_job": lambda rc: rc.put_job("j", nodes=["p0"]),
    "post_stats": lambda rc: rc.post_stats("j", batch_id=1, epoch=0, key_groups=[]),
    "create_proposal": lambda rc: rc.create_proposal("j"),
    "execute_proposal": lambda rc: rc.execute_proposal("j", "p1"),
    "change_nodes": lambda rc: rc.change_nodes("j", add=["p1"]),
    "plan": lambda rc: rc.plan({"nodes": []}, "flux"),
    "history": lambda rc: rc.history("j"),
    "evaluate": lambda rc: rc.evaluate({}, {}),
    "what_if_scaling": lambda rc: rc.what_if_scaling({}, [2]),
    "list_jobs": lambda rc: rc.list_jobs(),
    "algorithms": lambda rc: rc.algorithms(),
}


@pytest.mark.parametrize("status", [200, 201, 202])
@pytest.mark.parametrize("call", sorted(CALLS))
def test_a_malformed_2xx_body_is_a_rebalancer_error(scripted, call, status):
    server = scripted(lambda n, m, t, conn: conn.sendall(raw_response(status, MALFORMED[n % len(MALFORMED)])))
    rc = RebalancerClient(server.url, timeout=5, retries=0, proposal_poll_timeout=0.5)
    for body in MALFORMED:
        try:
            out = CALLS[call](rc)
            if body == b"[]" and call in ("list_jobs", "algorithms"):
                assert out == []  # the one valid document in the list
                continue
        except RebalancerError:
            pass
        except Exception as exc:  # noqa: BLE001 - the point: nothing but RebalancerError escapes
            pytest.fail(f"{call} on {body[:60]!r}: {type(exc).__name__}: {exc}")
        else:
            pytest.fail(f"{call} accepted {body[:60]!r}")
    assert not any("None" in r or "healthz" in r for r in server.requests), server.requests


def test_retry_after_that_is_not_a_number_or_a_date_is_ignored(scripted):
    server = scripted(reply(503, {"detail": "busy"}, {"Retry-After": "soon"}))
    rc = RebalancerClient(server.url, timeout=2, retries=2, backoff=0.01)
    with pytest.raises(ServerError) as err:
        rc.get_job("j")
    assert err.value.status_code == 503 and len(server.requests) == 3


def test_a_huge_response_is_not_read_to_the_end(scripted):
    big = json.dumps({**JOB, "pad": "x" * 3_000_000}).encode()
    chunked = (b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n"
               b"Connection: close\r\n\r\n" + b"".join(b"%x\r\n%s\r\n" % (len(big[i:i + 65536]), big[i:i + 65536])
                                                       for i in range(0, len(big), 65536)) + b"0\r\n\r\n")
    server = scripted(lambda n, m, t, conn: conn.sendall(raw_response(200, big) if n == 0 else chunked))
    rc = RebalancerClient(server.url, timeout=5, retries=0, max_response_bytes=1_000_000)
    for _ in range(2):  # with Content-Length, then chunked without it
        with pytest.raises(RebalancerError, match="max_response_bytes"):
            rc.get_job("j")
    assert RebalancerClient(server.url, timeout=5, retries=0).get_job("j").epoch == 3  # default cap: 128 MiB


# ---------------------------------------------------------------- retries of non-idempotent calls
def _drop_first(then: Respond) -> Respond:
    def respond(n: int, method: str, target: str, conn: socket.socket) -> None:
        if n == 0:
            conn.shutdown(socket.SHUT_RDWR)  # the request arrived; the answer is lost
        else:
            then(n, method, target, conn)
    return respond


def test_change_nodes_is_not_retried_once_the_request_reached_the_server(scripted):
    server = scripted(_drop_first(reply(200, JOB)))
    rc = RebalancerClient(server.url, timeout=2, retries=3, backoff=0.01)
    with pytest.raises(ControllerUnavailable):
        rc.change_nodes("j", delete=["p1"])
    server503 = scripted(reply(503, {"detail": "busy"}))
    with pytest.raises(ServerError):
        RebalancerClient(server503.url, timeout=2, retries=3, backoff=0.01).change_nodes("j", add=["p2"])
    assert len(server.requests) == 1 and len(server503.requests) == 1


def test_a_retried_delete_that_finds_the_job_gone_succeeds(scripted):
    server = scripted(_drop_first(reply(404, {"detail": "unknown job 'j'"})))
    rc = RebalancerClient(server.url, timeout=2, retries=2, backoff=0.01)
    rc.delete_job("j")
    assert server.requests == ["DELETE /v1/jobs/j", "DELETE /v1/jobs/j"]
    with pytest.raises(NotFoundError):  # a first answer 404 is still an error
        rc.delete_job("j")


def test_a_pending_proposal_is_polled_until_ready_and_no_longer_than_the_poll_timeout(scripted):
    pending = {"id": "abc123", "job_id": "j", "base_epoch": 0, "status": "pending", "algorithm": "flux",
               "params": {}, "time_limit_s": 1.0, "plan": None, "created_at": 0.0}
    failed = {**pending, "status": "failed", "error": "solver worker died"}
    server = scripted(lambda n, m, t, conn: conn.sendall(raw_response(202 if n == 0 else 200, json.dumps(
        failed if n == 3 else pending).encode())))
    rc = RebalancerClient(server.url, timeout=2, retries=0, proposal_poll_timeout=10)
    prop = rc.create_proposal("j")
    assert (prop.status, prop.error, prop.plan) == ("failed", "solver worker died", None)
    assert server.requests == ["POST /v1/jobs/j/proposals"] + ["GET /v1/jobs/j/proposals/abc123"] * 3
    always = scripted(reply(202, pending))
    rc = RebalancerClient(always.url, timeout=2, retries=0, proposal_poll_timeout=0.5)
    t0 = time.monotonic()
    assert rc.create_proposal("j").status == "pending"
    assert time.monotonic() - t0 < 1.5 and len(always.requests) >= 2


def test_a_base_url_that_is_not_http_is_refused_at_once():
    for url in ("ctl:8000", "ftp://ctl", "http://[::1"):
        with pytest.raises(RebalancerError):
            RebalancerClient(url)


# ---------------------------------------------------------------- path segments
def test_ids_are_one_url_encoded_path_segment(scripted):
    server = scripted(reply(404, {"detail": "unknown"}))
    rc = RebalancerClient(server.url, timeout=2, retries=0)
    for call in (lambda: rc.get_job("a/b?c=#d"), lambda: rc.get_proposal("j", "../x"),
                 lambda: rc.delete_job("victim?x=")):
        with pytest.raises(NotFoundError):
            call()
    assert server.requests == ["GET /v1/jobs/a%2Fb%3Fc%3D%23d", "GET /v1/jobs/j/proposals/..%2Fx",
                               "DELETE /v1/jobs/victim%3Fx%3D"]
    for bad in ("", ".", "..", None):
        with pytest.raises(RebalancerError):
            rc.get_job(bad)  # type: ignore[arg-type]
    assert len(server.requests) == 3


def test_encoded_ids_against_the_real_controller(controller):
    victim = "victim-" + uuid.uuid4().hex[:8]
    with RebalancerClient(controller.url, timeout=10, retries=0) as rc:
        rc.put_job(victim, nodes=["p0"], operators=[{"id": "agg", "key_groups": 2}], algorithm="flux")
        with pytest.raises(RebalancerError):
            rc.delete_job(victim + "?x=")
        with pytest.raises(RebalancerError):
            rc.delete_job(victim + "/")
        assert rc.get_job(victim).job_id == victim  # still there
        with pytest.raises(RebalancerError):
            rc.get_job("../healthz")  # never GET /v1/healthz (or /healthz) read as a job
        with pytest.raises(RebalancerError):
            rc.get_job("../../healthz")
        rc.delete_job(victim)
