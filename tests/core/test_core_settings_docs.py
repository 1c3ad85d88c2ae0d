"""docs/deployment.md lists every setting: each ``Settings`` field's ``MARLFORGE_*`` variable, and
each variable the code reads that is not a field (the learners' thread counts)."""

from __future__ import annotations

import re
from pathlib import Path

from core.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
SOURCES = ("api", "core", "workers", "learners", "docker")


def _documented() -> set[str]:
    text = (ROOT / "docs" / "deployment.md").read_text()
    return set(re.findall(r"^\| `(MARLFORGE_[A-Z0-9_]+)` \|", text, flags=re.MULTILINE))


def test_every_settings_field_is_documented() -> None:
    fields = {f"MARLFORGE_{name.upper()}" for name in Settings.model_fields}

    assert fields - _documented() == set()


def test_every_variable_the_code_reads_is_documented() -> None:
    named: set[str] = set()
    for folder in SOURCES:
        for path in (ROOT / folder).rglob("*"):
            if path.suffix in {".py", ".yml"} or path.name == "Dockerfile":
                named.update(re.findall(r"MARLFORGE_[A-Z][A-Z0-9_]*[A-Z]", path.read_text()))

    assert named - _documented() == set()
    assert {"MARLFORGE_WORKER_THREADS", "MARLFORGE_CPU_THREADS"} <= named
