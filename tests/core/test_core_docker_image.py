"""The image recipe: what ``.dockerignore`` sends to the build (read the way Docker reads it), the
dependency layer that a change to the sources does not invalidate, ``docker/requirements.py``
that feeds it, the pinned base and the unprivileged user. hadolint runs on the Dockerfile in
test_core_deploy.py, with the compose validator."""

from __future__ import annotations

import posixpath
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from learners.enums import Backend

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "docker" / "Dockerfile"

LEFT_OUT = [
    ".venv/bin/python",
    ".venv/lib/python3.11/site-packages/torch/__init__.py",
    "var/marlforge.db",
    "var/artifacts/exp/ckpt-1.safetensors",
    ".git/HEAD",
    ".git/objects/pack/pack-1.pack",
    "api/__pycache__/app.cpython-311.pyc",
    "learners/backends/torch/__pycache__/ops.cpython-311.pyc",
    ".pytest_cache/v/cache/nodeids",
    "core/.mypy_cache/3.11/core.json",
    ".ruff_cache/content",
    "test-artifacts/report.xml",
    "tests/conftest.py",
    "benchmarks/results/storage.csv",
    "marlforge.egg-info/PKG-INFO",
    "learners/kernel_meta/kernel.o",
    "rank_0/om/log",
    "MUJOCO_LOG.TXT",
    "docker/.env",
    "docker/gpu-worker.env",
    ".env",
    "docs/deployment.md",
    "node_modules/dclint/package.json",
]
"""Paths a working copy holds that must never reach the build context."""


def _glob_regex(pattern: str) -> str:
    """Docker's translation of a .dockerignore line (moby's patternmatcher): Go's filepath.Match,
    whose ``*`` and ``?`` stop at ``/``, and ``**`` for any number of folders."""
    regex, i = "", 0
    while i < len(pattern):
        if pattern.startswith("**", i):
            i += 2
            if pattern.startswith("/", i):
                i += 1
            regex += ".*" if i == len(pattern) else "(.*/)?"
            continue
        regex += {"*": "[^/]*", "?": "[^/]"}.get(pattern[i], re.escape(pattern[i]))
        i += 1
    return f"^{regex}$"


def _dockerignore() -> list[tuple[bool, re.Pattern[str]]]:
    """(lets back in, pattern) for each line of .dockerignore, as Docker cleans it."""
    rules = []
    for line in (ROOT / ".dockerignore").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        assert "[" not in line, "the matcher here does not read character classes"
        keep = line.startswith("!")
        pattern = posixpath.normpath(line.removeprefix("!").strip()).lstrip("/")
        rules.append((keep, re.compile(_glob_regex(pattern))))
    return rules


def _sent(path: str, rules: list[tuple[bool, re.Pattern[str]]]) -> bool:
    """Whether ``docker build`` sends ``path``: the last line that matches the path or one of its
    folders decides (a folder left out takes everything in it along)."""
    parts = path.split("/")
    prefixes = ["/".join(parts[:i]) for i in range(1, len(parts) + 1)]
    sent = True
    for keep, pattern in rules:
        if any(pattern.match(prefix) for prefix in prefixes):
            sent = keep
    return sent


def _instructions() -> list[tuple[str, str]]:
    """The Dockerfile's instructions, continuation lines joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    instructions = []
    for line in joined.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            keyword, _, args = line.partition(" ")
            instructions.append((keyword.upper(), args.strip()))
    return instructions


def _copy_sources() -> list[str]:
    return [src for kw, args in _instructions() if kw == "COPY" for src in shlex.split(args)[:-1]]


def test_dockerignore_leaves_out_what_a_working_copy_accumulates() -> None:
    rules = _dockerignore()

    assert [path for path in LEFT_OUT if _sent(path, rules)] == []


def test_dockerignore_sends_every_file_the_image_copies_and_nothing_else() -> None:
    rules = _dockerignore()
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    sources = _copy_sources()

    copied = [p for p in tracked if any(p == s or p.startswith(f"{s}/") for s in sources)]
    assert copied and [p for p in copied if not _sent(p, rules)] == []
    assert [p for p in tracked if _sent(p, rules) and p not in copied] == []
    assert {s.split("/")[0] for s in sources} >= {"api", "core", "workers", "learners"}


def test_the_dependencies_are_installed_before_the_sources_are_copied() -> None:
    instructions = _instructions()
    installs = [i for i, (kw, args) in enumerate(instructions) if "pip install" in args]
    copies = [i for i, (kw, _) in enumerate(instructions) if kw == "COPY"]

    # The layer with the frameworks depends on pyproject.toml and the script that reads it only:
    # a change to the sources rebuilds from the first COPY after it.
    assert len(installs) == 2
    before = [shlex.split(instructions[i][1])[:-1] for i in copies if i < installs[0]]
    assert before == [["pyproject.toml", "docker/requirements.py"]]
    deps = instructions[installs[0]][1]
    assert 'requirements.py pyproject.toml "$EXTRAS"' in deps
    assert "--requirement requirements.txt" in deps
    assert all(installs[0] < i < installs[1] for i in copies if i > installs[0])
    assert "--no-deps" in instructions[installs[1]][1]
    assert "pip check" in instructions[installs[1]][1]


def test_the_base_is_pinned_and_the_processes_run_unprivileged() -> None:
    instructions = _instructions()
    (base,) = [args for kw, args in instructions if kw == "FROM"]
    users = [args for kw, args in instructions if kw == "USER"]

    # The base is a build argument (scripts/compose-smoke.sh passes one built from Debian's
    # packages) whose default, the image an operator builds on, is the pinned official one.
    assert base == "${BASE_IMAGE}"
    first = [args for kw, args in instructions][0]
    assert instructions[0][0] == "ARG" and first.startswith("BASE_IMAGE=")
    assert re.fullmatch(r"python:3\.11\.\d+-slim-[a-z]+", first.removeprefix("BASE_IMAGE=")), first
    # Numeric, so a host (and Kubernetes' runAsNonRoot) can tell it is not root; it owns the var
    # folder, the only place a process writes.
    assert users == ["10001:10001"]
    assert [kw for kw, _ in instructions].index("USER") > max(
        i for i, (_, args) in enumerate(instructions) if "pip install" in args
    )
    env = dict(
        pair.split("=", 1) for kw, args in instructions if kw == "ENV" for pair in shlex.split(args)
    )
    assert env["MARLFORGE_VAR_DIR"] == "/var/lib/marlforge"
    assert "chown 10001:10001 /var/lib/marlforge" in DOCKERFILE.read_text()
    # The artifacts live in the store the settings name, not in a directory the image fixes.
    assert "MARLFORGE_ARTIFACTS_DIR" not in env


def _requirements(extras: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            str(ROOT / "docker" / "requirements.py"),
            str(ROOT / "pyproject.toml"),
            extras,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("backend", list(Backend))
def test_the_dependency_layer_installs_the_project_dependencies_and_one_extra(
    backend: Backend,
) -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = pyproject["project"]

    result = _requirements(backend.value)

    assert result.returncode == 0, result.stderr
    assert result.stdout.split("\n")[:-1] == [
        *pyproject["build-system"]["requires"],
        *project["dependencies"],
        *project["optional-dependencies"][backend.value],
    ]
    # pip would look the project itself up on PyPI.
    assert not any(line.startswith(project["name"]) for line in result.stdout.splitlines())


def test_the_dependency_layer_fails_on_an_extra_pyproject_does_not_define() -> None:
    result = _requirements("torch,tensorflw")

    assert result.returncode != 0
    assert "unknown extras ['tensorflw']" in result.stderr
