"""The image's rules, read from the Dockerfile and .dockerignore as a linter would (no Docker engine is needed):
a pinned base image whose Python matches the lock's, dependencies from the lock in their own layer before the
sources, no pip cache, a non-root user, a readiness HEALTHCHECK on ``$PORT``, one process (``rebalancer serve``),
and a build context without virtualenvs, databases, results, caches or git history.

The reading itself (:func:`instructions`, :func:`stages`, :func:`ignored`) is also what
``test_image_smoke.py`` uses to run the Dockerfile's steps outside Docker.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
LOCK = ROOT / "constraints.txt"
IMAGE_LOCK = ROOT / "requirements-image.txt"


@dataclass
class Instruction:
    op: str                      # FROM, RUN, COPY, ... (upper case)
    args: str                    # the rest, continuation lines joined, flags removed
    flags: dict[str, str] = field(default_factory=dict)  # --from=build, --interval=15s, ...
    line: int = 0

    def exec_form(self) -> list[str] | None:
        """``["a", "b"]`` for the JSON (exec) form, None for the shell form."""
        text = self.args.strip()
        if text.startswith("["):
            value = json.loads(text)
            assert isinstance(value, list) and all(isinstance(v, str) for v in value), self
            return value
        return None


def instructions(text: str) -> list[Instruction]:
    """The Dockerfile's instructions in order (comments dropped, ``\\`` continuations joined)."""
    out: list[Instruction] = []
    pending, start = "", 0
    for number, raw in enumerate(text.splitlines(), 1):
        stripped = raw.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if pending and stripped.startswith("#"):
            continue
        start = start or number
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        full, pending = pending + stripped, ""
        op, _, rest = full.partition(" ")
        flags: dict[str, str] = {}
        rest = rest.strip()
        while rest.startswith("--"):
            flag, _, rest = rest.partition(" ")
            name, _, value = flag[2:].partition("=")
            flags[name] = value
            rest = rest.strip()
        if op.upper() == "HEALTHCHECK" and rest.upper().startswith("CMD "):
            rest = rest[4:].strip()
        out.append(Instruction(op.upper(), rest, flags, start))
        start = 0
    return out


def stages(text: str) -> list[tuple[str, list[Instruction]]]:
    """``[(name or index, instructions after its FROM, FROM included)]``."""
    out: list[tuple[str, list[Instruction]]] = []
    for ins in instructions(text):
        if ins.op == "FROM":
            words = ins.args.split()
            name = words[2] if len(words) == 3 and words[1].upper() == "AS" else str(len(out))
            out.append((name, [ins]))
        else:
            assert out, f"line {ins.line}: {ins.op} before FROM"
            out[-1][1].append(ins)
    return out


# -------------------------------------------------------------------------------------------- .dockerignore
def _pattern_regex(pattern: str) -> re.Pattern[str]:
    """A .dockerignore pattern (Go's filepath.Match plus ``**``) as a regular expression over a relative path."""
    parts: list[str] = []
    i = 0
    while i < len(pattern):
        c = pattern[i]
        if pattern.startswith("**/", i):
            parts.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            parts.append(".*")
            i += 2
            continue
        parts.append({"*": "[^/]*", "?": "[^/]"}.get(c, re.escape(c)))
        i += 1
    return re.compile("".join(parts) + r"\Z")


def ignore_rules(text: str) -> list[tuple[bool, re.Pattern[str]]]:
    """``[(is an exception (!), pattern)]`` of a .dockerignore, in order."""
    rules = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negate = line.startswith("!")
        pattern = line[1:].strip() if negate else line
        pattern = pattern.strip("/").removeprefix("./")
        rules.append((negate, _pattern_regex(pattern)))
    return rules


def ignored(rel: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Whether Docker leaves ``rel`` out of the build context: the last rule that matches the path or one of its
    parent folders decides (Docker's own order)."""
    parts = rel.strip("/").split("/")
    prefixes = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    verdict = False
    for negate, regex in rules:
        if any(regex.match(p) for p in prefixes):
            verdict = not negate
    return verdict


# -------------------------------------------------------------------------------------------------- checks
@pytest.fixture(scope="module")
def text() -> str:
    return DOCKERFILE.read_text()


def final_stage(text: str) -> list[Instruction]:
    return stages(text)[-1][1]


def lock_python() -> str:
    header = LOCK.read_text().splitlines()[0]
    found = re.search(r"Python (\d+\.\d+)\.\d+", header)
    assert found, f"{LOCK.name}'s first line does not name the Python that made it: {header}"
    return found.group(1)


def test_base_images_are_pinned_and_match_the_lock(text: str) -> None:
    for name, body in stages(text):
        image = body[0].args.split()[0]
        if image in {n for n, _ in stages(text)}:
            continue  # FROM an earlier stage
        repo, _, tag = image.partition(":")
        assert "@sha256:" in image or re.fullmatch(r"\d+\.\d+\.\d+(-[a-z0-9-]+)?", tag), \
            f"stage {name}: {image} is not pinned to a full version (or a digest)"
        if repo.endswith("python"):
            assert tag.startswith(lock_python() + "."), \
                f"stage {name}: {image} is not the Python the lock was made with ({lock_python()}); run `make lock`"


def test_pip_never_keeps_a_cache_and_installs_only_from_the_lock(text: str) -> None:
    pip_runs = [ins for ins in instructions(text)
                if ins.op == "RUN" and re.search(r"\bpip (install|wheel)\b", ins.args)]
    assert pip_runs, "no pip step found"
    for ins in pip_runs:
        for command in re.split(r"&&|;", ins.args):
            words = shlex.split(command)
            if words[:2] not in (["pip", "install"], ["pip", "wheel"]):
                continue
            assert "--no-cache-dir" in words, f"line {ins.line}: {command.strip()} keeps pip's cache in the image"
            if words[1] == "install":
                from_lock = ("-c" in words and "constraints.txt" in words) or (
                    "--no-deps" in words and ("-r" in words or any(w.endswith(".whl") for w in words)))
                assert from_lock, f"line {ins.line}: {command.strip()} does not install from the lock"


def test_dependencies_are_a_layer_of_their_own_before_the_sources(text: str) -> None:
    body = final_stage(text)
    lock_copy = next(i for i, ins in enumerate(body) if ins.op == "COPY" and IMAGE_LOCK.name in ins.args)
    lock_install = next(i for i, ins in enumerate(body) if ins.op == "RUN" and IMAGE_LOCK.name in ins.args)
    wheel_copy = next(i for i, ins in enumerate(body) if ins.op == "COPY" and ins.flags.get("from"))
    assert lock_copy < lock_install < wheel_copy, "the dependency layer must come before the project's own files"
    assert not any(ins.op == "COPY" and not ins.flags.get("from") and ins.args.split()[0] != IMAGE_LOCK.name
                   for ins in body[:wheel_copy]), "only the lock is copied before the dependencies are installed"


def test_the_image_installs_exactly_the_locked_versions() -> None:
    pinned = dict(line.split("==") for line in LOCK.read_text().splitlines() if "==" in line)
    image = [line for line in IMAGE_LOCK.read_text().splitlines() if line and not line.startswith("#")]
    assert image, f"{IMAGE_LOCK.name} is empty"
    for line in image:
        name, _, version = line.partition("==")
        assert version and pinned.get(name) == version, f"{IMAGE_LOCK.name}: {line} is not {LOCK.name}'s version"


def test_runs_as_a_non_root_user(text: str) -> None:
    users = [ins.args.split(":")[0] for ins in final_stage(text) if ins.op == "USER"]
    assert users, "no USER in the final stage: the server would run as root"
    assert users[-1] not in {"root", "0"}, f"USER {users[-1]} is root"
    body = final_stage(text)
    assert max(i for i, ins in enumerate(body) if ins.op == "USER") < \
        next(i for i, ins in enumerate(body) if ins.op == "CMD"), "USER must come before CMD"


def test_one_process_rebalancer_serve(text: str) -> None:
    body = final_stage(text)
    cmds = [ins for ins in body if ins.op == "CMD"]
    assert len(cmds) == 1 and not [ins for ins in body if ins.op == "ENTRYPOINT"]
    argv = cmds[0].exec_form()
    assert argv is not None, "CMD in shell form: a shell would be PID 1 and SIGTERM would not reach the server"
    assert argv[:2] == ["rebalancer", "serve"], argv
    assert "--port" not in argv, "the port comes from $PORT (the HEALTHCHECK reads the same variable)"


def test_healthcheck_is_readiness_on_the_configured_port(text: str) -> None:
    checks = [ins for ins in final_stage(text) if ins.op == "HEALTHCHECK"]
    assert len(checks) == 1, "exactly one HEALTHCHECK"
    command = " ".join(checks[0].exec_form() or [checks[0].args])
    assert "/readyz" in command and "/healthz" not in command, command
    assert "PORT" in command, f"the HEALTHCHECK must use $PORT, as the server does: {command}"
    env = " ".join(ins.args for ins in final_stage(text) if ins.op == "ENV")
    assert re.search(r"\bPORT=8000\b", env), "ENV PORT=8000 (the documented default) is missing"


def test_no_add_and_every_source_package_is_copied(text: str) -> None:
    assert not [ins for ins in instructions(text) if ins.op == "ADD"], "use COPY (ADD fetches URLs, unpacks archives)"
    find = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    packages = {p.rstrip("*") for p in find["include"]}
    copied = {ins.args.split()[0].rstrip("/") for ins in instructions(text) if ins.op == "COPY"}
    assert packages <= copied, f"packages not copied into the build: {sorted(packages - copied)}"


def test_the_build_context_leaves_out_what_it_must() -> None:
    rules = ignore_rules(DOCKERIGNORE.read_text())
    for rel in [".venv/bin/python", "data/rebalancer.db", ".git/HEAD", "bench-results/api.json",
                "api/__pycache__/app.cpython-311.pyc", ".pytest_cache/v/cache", ".mypy_cache/x", "build/lib/x.py",
                "dist/rebalancer-0.1.0-py3-none-any.whl", "site/index.html", "tests/conftest.py", "docs/index.md"]:
        assert ignored(rel, rules), f"{rel} would be sent to the Docker build"
    for ins in instructions(DOCKERFILE.read_text()):
        if ins.op == "COPY" and not ins.flags.get("from"):
            for source in ins.args.split()[:-1]:
                assert not ignored(source, rules), f"line {ins.line}: {source} is left out by .dockerignore"


def test_compose_runs_the_image_on_postgresql_with_a_volume() -> None:
    import yaml

    from controller.settings import Settings

    services = yaml.safe_load((ROOT / "compose.yaml").read_text())["services"]
    pg, ctl = services["postgres"], services["controller"]
    assert re.fullmatch(r"postgres:\d+\.\d+(-[a-z0-9]+)?", pg["image"]), f"unpinned {pg['image']}"
    assert any(v.endswith(":/var/lib/postgresql/data") and not v.startswith((".", "/")) for v in pg["volumes"]), \
        "PostgreSQL's data is not in a named volume"
    assert ctl["build"] == "." and ctl["depends_on"]["postgres"]["condition"] == "service_healthy"
    url = re.sub(r"\$\{(\w+):-([^}]*)\}", r"\2", ctl["environment"]["REBALANCER_DATABASE_URL"])
    assert url.startswith("postgresql+psycopg://") and "@postgres:5432/" in url, url
    assert Settings(database_url=url).sqlalchemy_url() == url
    port = ctl["environment"]["PORT"]
    assert any(mapping.endswith(f":{port}") for mapping in ctl["ports"]), "the published port is not $PORT"


def test_the_dockerignore_reader_follows_dockers_rules() -> None:
    rules = ignore_rules("*\n!api/\n**/__pycache__\n!keep.txt\n")
    assert ignored("x.py", rules) and ignored("deep/x.py", rules)
    assert not ignored("api/app.py", rules) and not ignored("keep.txt", rules)
    assert ignored("api/__pycache__/a.pyc", rules) and ignored("api/sub/__pycache__/a.pyc", rules)
