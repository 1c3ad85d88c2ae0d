"""Worker tests: the run job and its hooks on the session's PostgreSQL database, with real
commits (a job commits as it goes, exactly as in production), real artifact files and, where a run
trains, the real learner with a tiny budget."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from core.db import make_session_factory
from core.dispatch.queue import CeleryDispatcher
from core.experiments import service as experiments
from core.settings import Settings
from core.storage import FilesystemStore
from learners.admission.parse import parse_spec
from tests.auth_support import default_project_id
from workers.outcome import RunLimits


@pytest.fixture(autouse=True, scope="session")
def _one_torch_thread() -> None:
    # Two shared cores: torch's default of one thread per core oversubscribes them several-fold.
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(1)


@pytest.fixture
def session_factory(pg_engine: Engine) -> sessionmaker[Session]:
    """Sessions that really commit (the worker's view of the database)."""
    return make_session_factory(pg_engine)


@pytest.fixture
def storage(tmp_path: Path) -> FilesystemStore:
    """Artifact storage in the test's folder."""
    return FilesystemStore(tmp_path / "artifacts")


@pytest.fixture
def limits() -> RunLimits:
    """Fast polling so that tests see a cancel within a fraction of a second."""
    return RunLimits(poll_interval_s=0.1, time_limit_s=600)


@pytest.fixture
def dispatcher(tmp_path: Path, pg_url: str) -> CeleryDispatcher:
    """The service's dispatcher on an embedded broker in the test's folder."""
    settings = Settings(
        var_dir=tmp_path / "var",
        database_url=pg_url,
        broker_url="filesystem://",
        queue_prefix="workertest.",
    )
    return CeleryDispatcher(settings)


@pytest.fixture
def submit(
    dispatcher: CeleryDispatcher, session_factory: sessionmaker[Session]
) -> Iterator[Callable[..., str]]:
    """Submits a spec through the service (embedded broker in the test's folder); returns the id."""

    def _submit(spec: dict[str, Any]) -> str:
        with session_factory() as session:
            project_id = default_project_id(session)
            return experiments.submit(session, dispatcher, parse_spec(spec), project_id).id

    yield _submit
