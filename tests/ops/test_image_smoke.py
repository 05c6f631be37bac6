"""The image, smoke-tested without a Docker engine: the Dockerfile's own steps are run here, stage by stage.

Each stage's file system is a folder (the Dockerfile's absolute paths, ``/src``, ``/wheels``, ``/data``, ``/tmp``,
are mapped into it) and its Python a fresh virtualenv of this interpreter (the base image's version, checked).
``COPY`` takes the build context as .dockerignore leaves it, ``RUN`` runs the same commands with the same ``ENV``,
``USER`` is a real non-root uid (``setpriv``), and ``CMD`` and ``HEALTHCHECK`` are run as written. Then, as an
operator would: migrations (``rebalancer db upgrade``), start, readiness through the HEALTHCHECK, a job registered
and a plan executed, SIGTERM, restart, and the job is still there.

What differs from a real build, on purpose: pip may use its cache and skips byte-compiling (``--no-cache-dir``
dropped, ``--no-compile`` added: the same files, a faster install), and ``useradd``/``groupadd`` are not run (the
uid of ``USER`` is used as is, as Docker does for a numeric user).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_image_static import (  # noqa: E402
    DOCKERFILE,
    DOCKERIGNORE,
    ROOT,
    Instruction,
    ignore_rules,
    ignored,
    stages,
)

from tests.helpers.procs import group_pids  # noqa: E402
from tests.helpers.server import free_port  # noqa: E402

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not sys.platform.startswith("linux") or shutil.which("setpriv") is None or os.geteuid() != 0,
                       reason="needs Linux, setpriv and root (to become the image's non-root user)"),
]

SKIPPED_COMMANDS = ("groupadd", "useradd")


class Stage:
    """One ``FROM`` of the Dockerfile: a folder for its file system, a virtualenv for its Python."""

    def __init__(self, root: Path, image: str):
        self.root = root
        self.env: dict[str, str] = {}
        self.workdir = "/"
        self.user: tuple[int, int] | None = None
        version = re.search(r"python:(\d+\.\d+)", image)
        assert version, f"the emulation knows python base images only, not {image}"
        if version.group(1) != f"{sys.version_info[0]}.{sys.version_info[1]}":
            pytest.skip(f"the base image is Python {version.group(1)}, this interpreter is not")
        root.mkdir(parents=True)
        subprocess.run([shared_interpreter(), "-m", "venv", str(root / "python")], check=True)

    def path(self, container_path: str) -> Path:
        """A path of the container (absolute, or relative to WORKDIR) in this stage's folder."""
        full = container_path if container_path.startswith("/") else f"{self.workdir.rstrip('/')}/{container_path}"
        return self.root / full.lstrip("/")

    def map(self, text: str) -> str:
        """``text`` with the container's absolute paths (any ``/name`` after a space, quote, ``=`` or ``/``) moved
        into this stage's folder."""
        return re.sub(r"(?<![\w.~-])/(?=[A-Za-z_])", lambda m: str(self.root) + "/", text)

    def environment(self) -> dict[str, str]:
        base = {"PATH": f"{self.root / 'python' / 'bin'}:/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8",
                "HOME": str(self.path(self.workdir))}
        keep = {k: v for k, v in os.environ.items() if k.startswith("PIP_") or k in {"SSL_CERT_FILE", "TMPDIR"}}
        return {**base, **keep, **{k: self.map(v) for k, v in self.env.items()}}

    def as_user(self, argv: list[str]) -> list[str]:
        if self.user is None:
            return argv
        uid, gid = self.user
        return ["setpriv", f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--", *argv]


def shared_interpreter() -> str:
    """This Python version's interpreter that any user may run (the image's user runs it too: an interpreter
    under root's home, as pyenv installs it, is not one)."""
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    candidates = [getattr(sys, "_base_executable", sys.executable), f"/usr/local/bin/python{version}",
                  f"/usr/bin/python{version}"]
    for candidate in candidates:
        path = Path(candidate).resolve()
        if path.exists() and all(p.stat().st_mode & 0o001 for p in [path, *path.parents]):
            out = subprocess.run([str(path), "-c", "import sys, venv; print(sys.version_info[:2])"],
                                 capture_output=True, text=True)
            if out.returncode == 0 and out.stdout.strip() == str(sys.version_info[:2]):
                return str(path)
    pytest.skip(f"no Python {version} that a non-root user may run (tried {candidates})")


def _env_pairs(args: str) -> dict[str, str]:
    return dict(pair.split("=", 1) for pair in args.split())


def _copy(src: Path, dst: Path, rules: list, rel: str) -> None:
    if src.is_dir():
        for child in sorted(src.iterdir()):
            if not ignored(f"{rel}/{child.name}", rules):
                _copy(child, dst / child.name, rules, f"{rel}/{child.name}")
    else:
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dst)


def _pip_as_tested(command: str) -> str:
    if re.match(r"\s*pip (install|wheel)\b", command):
        command = command.replace(" --no-cache-dir", "")
        if " install " in f" {command} ":
            command = command.replace("pip install", "pip install --no-compile", 1)
    return command


def build(workspace: Path) -> Stage:
    """Run the Dockerfile's stages; the last one, ready for its CMD."""
    rules = ignore_rules(DOCKERIGNORE.read_text())
    built: dict[str, Stage] = {}
    stage: Stage | None = None
    for name, body in stages(DOCKERFILE.read_text()):
        stage = built[name] = Stage(workspace / f"stage-{name}", body[0].args.split()[0])
        for ins in body[1:]:
            run_instruction(stage, ins, built, rules)
    assert stage is not None
    return stage


def run_instruction(stage: Stage, ins: Instruction, built: dict[str, Stage], rules: list) -> None:
    if ins.op == "ENV":
        stage.env.update(_env_pairs(ins.args))
    elif ins.op == "WORKDIR":
        stage.workdir = ins.args
        stage.path(ins.args).mkdir(parents=True, exist_ok=True)
    elif ins.op == "USER":
        uid, _, gid = ins.args.partition(":")
        assert uid.isdigit() and gid.isdigit(), f"USER {ins.args}: the smoke test needs numeric ids"
        stage.user = (int(uid), int(gid))
    elif ins.op == "COPY":
        *sources, dest = ins.args.split()
        into_dir = dest.endswith("/") or len(sources) > 1
        for source in sources:
            if "from" in ins.flags:
                origin, rel = built[ins.flags["from"]].path(source), source.lstrip("/")
            else:
                origin, rel = ROOT / source, source
            target = stage.path(dest)
            if into_dir and origin.is_file():
                target = target / origin.name
            _copy(origin, target, rules if "from" not in ins.flags else [], rel)
    elif ins.op == "RUN":
        commands = [c.strip() for c in ins.args.split("&&")]
        kept = [_pip_as_tested(c) for c in commands if not c.startswith(SKIPPED_COMMANDS)]
        script = stage.map(" && ".join(kept))
        started = time.monotonic()
        r = subprocess.run(["/bin/sh", "-c", script], cwd=stage.path(stage.workdir), env=stage.environment(),
                           capture_output=True, text=True, timeout=900)
        print(f"Dockerfile line {ins.line}: {time.monotonic() - started:.1f} s", file=sys.stderr)
        assert r.returncode == 0, f"Dockerfile line {ins.line}: {script}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    elif ins.op not in {"VOLUME", "EXPOSE", "HEALTHCHECK", "CMD", "ARG", "LABEL"}:
        raise AssertionError(f"Dockerfile line {ins.line}: the smoke test does not know {ins.op}")


def instruction(op: str) -> Instruction:
    return [ins for ins in stages(DOCKERFILE.read_text())[-1][1] if ins.op == op][-1]


def scratch() -> str | None:
    """Where the stages' files go: memory (/dev/shm) when it has room, since writing and deleting ~10,000 files
    of a virtualenv on a disk mounted with ``discard`` takes a minute; else the temporary folder."""
    try:
        usage = shutil.disk_usage("/dev/shm")
    except OSError:
        return None
    return "/dev/shm" if usage.free > 4 * 1024**3 and os.access("/dev/shm", os.W_OK) else None


@pytest.fixture(scope="module")
def image() -> Iterator[Stage]:
    workspace = Path(tempfile.mkdtemp(prefix="rebalancer-image-", dir=scratch()))
    workspace.chmod(0o755)  # the image's user must reach its files
    try:
        yield build(workspace)
    finally:
        shutil.rmtree(workspace, ignore_errors=True)


class Container:
    """The image's CMD as its USER, with its ENV and WORKDIR, on its ``port`` (:meth:`listen_on`; ``docker run -e
    PORT=…``)."""

    def __init__(self, stage: Stage, log: Path):
        self.stage, self.log = stage, log
        self.env = stage.environment()
        self.proc: subprocess.Popen[bytes] | None = None
        self.port: int | None = None  # until listen_on: the image's own ENV (its PORT), as `docker run` without -e

    def listen_on(self, port: int) -> None:
        """The server's ``PORT`` (taken just before the start: a port found free and then held for seconds is one
        another test process can be given)."""
        self.port = port
        self.env["PORT"] = str(port)

    def run(self, argv: list[str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run(self.stage.as_user(argv), cwd=self.stage.path(self.stage.workdir), env=self.env,
                              capture_output=True, text=True, timeout=timeout)

    def start(self) -> None:
        argv = instruction("CMD").exec_form()
        assert argv is not None and self.port is not None, "listen_on(port) before the start"
        with open(self.log, "ab") as out:
            self.proc = subprocess.Popen(self.stage.as_user(argv), cwd=self.stage.path(self.stage.workdir),
                                         env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)

    def healthcheck(self) -> int:
        argv = instruction("HEALTHCHECK").exec_form()
        assert argv is not None
        return self.run(argv, timeout=30).returncode

    def wait_healthy(self, timeout: float = 180) -> None:
        """Wait for readiness (polled over HTTP, cheaply), then check that the HEALTHCHECK says so too."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            assert self.proc is not None and self.proc.poll() is None, self.log.read_text()[-3000:]
            try:
                if httpx.get(f"http://127.0.0.1:{self.port}/readyz", timeout=2).status_code == 200:
                    assert self.healthcheck() == 0, "ready, but the HEALTHCHECK fails"
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise AssertionError(f"not ready after {timeout} s:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        """SIGTERM, as ``docker stop``: a clean shutdown, exit status 0, nothing of the process group left."""
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        status = self.proc.wait(timeout=60)
        log = self.log.read_text()
        assert status == 0, (status, log[-3000:])
        assert f"Finished server process [{self.proc.pid}]" in log, log[-3000:]
        deadline = time.monotonic() + 15  # the solver workers follow their server within moments
        while group_pids(self.proc.pid) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not group_pids(self.proc.pid), "SIGTERM left processes behind"

    def kill(self) -> None:
        if self.proc is not None:
            for _ in range(50):
                if not group_pids(self.proc.pid):
                    break
                try:
                    os.killpg(self.proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    break
                time.sleep(0.1)
            if self.proc.poll() is None:
                self.proc.wait(timeout=10)


def exercise(url: str) -> dict:
    """Register a job, post a skewed batch, plan and execute; a stateless plan too. The job as stored."""
    with httpx.Client(base_url=url, timeout=60) as c:
        job = c.put("/v1/jobs/smoke", json={"nodes": ["w0", "w1"], "operators": [{"id": "agg", "key_groups": 4}],
                                            "algorithm": "flux", "window_batches": 1})
        assert job.status_code == 201, job.text
        loads = [{"id": f"agg/{i}", "load": load} for i, load in enumerate([40, 30, 5, 5])]
        r = c.post("/v1/jobs/smoke/stats", json={"batch_id": 1, "epoch": 0, "key_groups": loads})
        assert r.status_code == 202, r.text
        proposal = c.post("/v1/jobs/smoke/proposals", json={})
        assert proposal.status_code == 201, proposal.text
        executed = c.post(f"/v1/jobs/smoke/proposals/{proposal.json()['id']}/execute")
        assert executed.status_code == 200 and executed.json()["epoch"] == 1, executed.text
        plan = c.post("/v1/plans", json={"algorithm": "flux", "problem": {
            "nodes": [{"id": "a"}, {"id": "b"}],
            "key_groups": [{"id": "k1", "node": "a", "load": 3}, {"id": "k2", "node": "a", "load": 1}]}})
        assert plan.status_code == 200 and plan.json()["moves"], plan.text
        stored = c.get("/v1/jobs/smoke")
        assert stored.status_code == 200, stored.text
        return stored.json()


def placement(job: dict) -> dict:
    """Where the job's key groups are (``assignment`` by id, or ``key_groups`` + ``placement`` by index)."""
    kept = {k: job[k] for k in ("epoch", "assignment", "key_groups", "placement") if k in job}
    assert "assignment" in kept or "placement" in kept, job
    return kept


def test_the_image_installs_migrates_serves_stops_and_keeps_its_data(image: Stage) -> None:
    container = Container(image, image.root / "server.log")
    version = container.run(["rebalancer", "--version"])
    assert version.returncode == 0 and re.fullmatch(r"rebalancer \d+\.\d+\.\d+\S*\n", version.stdout), version
    usage = container.run(["rebalancer", "--help"])
    assert usage.returncode == 0 and "serve" in usage.stdout and "plan" in usage.stdout, usage
    problem = image.path("/data/problem.json")
    problem.write_text('{"nodes": [{"id": "a"}, {"id": "b"}], "key_groups": [{"id": "k1", "node": "a", "load": 3},'
                       ' {"id": "k2", "node": "a", "load": 1}]}')
    planned = container.run(["rebalancer", "plan", "--algorithm", "albic-milp", "--input", "problem.json"])
    assert planned.returncode == 0 and '"optimal"' in planned.stdout, planned
    problem.unlink()
    upgrade = container.run(["rebalancer", "db", "upgrade"])
    assert upgrade.returncode == 0 and upgrade.stdout.strip().endswith("(head)"), upgrade
    database = image.path("/data/rebalancer.db")
    assert image.user is not None and image.user[0] != 0, "no non-root USER"
    assert database.exists() and database.stat().st_uid == image.user[0], "the database is not in the volume"
    container.listen_on(port := free_port())
    assert container.healthcheck() != 0, "the HEALTHCHECK passes while nothing listens"
    try:
        container.start()
        container.wait_healthy()
        before = exercise(f"http://127.0.0.1:{port}")
        assert before["epoch"] == 1
        container.stop()

        container.start()
        container.wait_healthy()
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as c:
            after = c.get("/v1/jobs/smoke").json()
            history = c.get("/v1/jobs/smoke/history").json()
        assert placement(after) == placement(before) and after["epoch"] == 1, (before, after)
        assert [e["kind"] for e in history["epochs"]] == ["register", "execute"], history
        container.stop()
    finally:
        container.kill()
    log = container.log.read_text()
    assert "Traceback" not in log, log[-3000:]
