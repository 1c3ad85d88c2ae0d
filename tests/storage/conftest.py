"""The store under test: every contract test runs once on a directory and once on a bucket of a
real S3-protocol server (moto's, its own process: ``tests/s3_support.py``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.storage import ArtifactStore, open_store
from tests.s3_support import MotoServer


@pytest.fixture(params=["filesystem", "s3"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ArtifactStore:
    """An empty store of each kind, made the way the service makes it (``open_store``)."""
    if request.param == "filesystem":
        return open_store((tmp_path / "store").as_uri(), cache_dir=tmp_path / "cache")
    server: MotoServer = request.getfixturevalue("s3_server")
    url: str = request.getfixturevalue("s3_url")
    return open_store(url, cache_dir=tmp_path / "cache", endpoint_url=server.endpoint)
