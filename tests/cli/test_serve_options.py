"""``rebalancer serve``'s options as a user reads them: ``--help`` explains ``--host``/``--port`` with their defaults,
and the port comes from ``$PORT`` when ``--port`` is not given (the image's CMD and HEALTHCHECK rely on it)."""

from __future__ import annotations

import os
import socket

from tests.helpers.cli import run_cli


def test_help_explains_host_and_port_with_defaults() -> None:
    r = run_cli("serve", "--help")
    assert r.returncode == 0
    text = " ".join(r.stdout.split())
    assert "--host HOST address to listen on" in text and "(default: 127.0.0.1)" in text, text
    assert "--port PORT TCP port" in text and "default: $PORT, else 8000" in text, text
    assert "(default: info)" in text, text


def test_the_port_comes_from_the_environment() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        # a database that cannot open: were $PORT ignored, the command would stop there instead of serving
        r = run_cli("serve", "--database", "sqlite:////proc/no-such-dir/x.db", env={**os.environ, "PORT": str(port)})
    assert r.returncode == 2, r.stderr
    assert f"127.0.0.1:{port} is already in use" in r.stderr, r.stderr


def test_a_bad_port_variable_is_one_line_naming_it() -> None:
    r = run_cli("serve", env={**os.environ, "PORT": "eighty"})
    assert r.returncode == 2
    assert r.stderr.strip() == "rebalancer serve: error: PORT: expected a port number, got 'eighty'", r.stderr
