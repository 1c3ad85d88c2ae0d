"""Every setting of the service, read once from ``MARLFORGE_*`` environment variables.

The defaults run the whole service on one laptop with nothing installed but Python: a SQLite
database, an embedded filesystem broker and the artifacts all live under ``./var``. A deployment
points ``MARLFORGE_DATABASE_URL`` at PostgreSQL and ``MARLFORGE_BROKER_URL`` at Redis.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

# The embedded broker: kombu's filesystem transport, its folders under ``<var_dir>/broker``.
EMBEDDED_BROKER_URL = "filesystem://"


class Settings(BaseSettings):
    """The service's configuration. Each field is read from ``MARLFORGE_<FIELD>``."""

    model_config = SettingsConfigDict(
        env_prefix="MARLFORGE_", frozen=True, extra="ignore", use_attribute_docstrings=True
    )

    var_dir: Path = Path("var")
    """Where the embedded defaults keep their state (SQLite database, broker folders, artifacts)."""
    database_url: str = ""
    """SQLAlchemy URL of the database; empty means SQLite at ``<var_dir>/marlforge.db``."""
    broker_url: str = EMBEDDED_BROKER_URL
    """Celery broker URL: ``filesystem://`` (embedded, under ``<var_dir>/broker``) or ``redis://...``."""
    artifacts_url: str = ""
    """Where every run's artifacts are stored (``core.storage``): ``file:///abs/path`` or
    ``s3://bucket/prefix``; empty: ``file://`` of ``artifacts_dir``."""
    artifacts_dir: Path = Path()
    """The filesystem store's directory when ``artifacts_url`` is empty; empty:
    ``<var_dir>/artifacts``."""
    s3_endpoint_url: str = ""
    """The S3 API's endpoint for MinIO and other non-AWS stores; empty: AWS's own."""
    s3_public_endpoint_url: str = ""
    """The S3 endpoint as the API's clients reach it, when it is not ``s3_endpoint_url`` (MinIO
    known inside a deployment as ``http://minio:9000``); presigned URLs are signed for it. Empty:
    ``s3_endpoint_url``."""
    store_outage_s: float = Field(default=120.0, ge=0, le=3600)
    """How long a worker keeps trying a checkpoint upload the artifact store refuses (a MinIO
    restarting, a network partition) before the run fails with the reason; 0: fail at once."""
    api_docs: bool = False
    """Serve the interactive API docs (Swagger UI at ``/docs``, ReDoc at ``/redoc``; their scripts
    come from jsDelivr, pinned and integrity-checked). Off by default; ``marlforge up`` turns it on.
    ``/openapi.json`` is served either way."""
    inference_cache_mb: int = Field(default=256, ge=1, le=1 << 20)
    """The memory an API process gives the policies its inference route keeps loaded (their
    arrays' bytes); past it the least recently used are dropped and loaded again when asked."""
    download_url_ttl_s: int = Field(default=0, ge=0, le=7 * 24 * 3600)
    """0: the API streams every checkpoint download itself. N > 0: a checkpoint download from an
    S3 store answers ``307`` with a URL presigned for N seconds, so the bytes go from the store to
    the client without passing through the API (a directory store still streams)."""
    queue_prefix: str = Field(default="marlforge.", max_length=100)
    """Prefix of the per-backend queue names (``marlforge.torch``...); separates deployments or
    test sessions sharing one broker."""
    secret_key: SecretStr = SecretStr("")
    """The secret that API keys and sessions are hashed with; empty: a random one kept in
    ``<var_dir>/secret.key``. Every API process and the CLI of a deployment must share it."""
    project_max_active_runs: int = Field(default=20, ge=1)
    """How many runs of one project may be queued or running at once; more is a 429."""
    project_submissions_per_minute: int = Field(default=30, ge=1)
    """How many experiments, sweeps, matches and resumes one project may submit in any 60
    seconds; more is a 429."""
    project_max_active_matches: int = Field(default=4, ge=1)
    """How many matches of one project may be queued or playing at once; more is a 429."""
    match_max_agent_steps: int = Field(default=5_000_000, ge=1)
    """The most agent steps one match may play (episodes x agents x the scenario's
    ``max_cycles``); more is a 422 naming ``episodes``. The default allows 1,000 episodes of the
    scenarios as they come (100,000 agent steps for ``simple_tag_v3``)."""
    api_host: str = "127.0.0.1"
    """Interface the API listens on."""
    api_port: int = Field(default=8000, ge=1, le=65535)
    """Port the API listens on."""
    run_time_limit_s: int = Field(default=48 * 3600, ge=60)
    """The longest a single run may train before it is stopped and failed; the broker's visibility
    timeout is set above it so a long run is never handed to a second worker."""
    poll_interval_s: float = Field(default=1.0, gt=0, le=60)
    """How often a running job flushes progress and metrics and re-reads its status (cancel)."""
    lease_ttl_s: float = Field(default=60.0, ge=2, le=3600)
    """How long a running job's lease lasts without a renewal (its worker renews it every poll
    interval). A run whose lease lapsed has lost its worker and is restarted from its latest
    checkpoint (``max_restarts`` in its spec)."""
    reaper_interval_s: float = Field(default=10.0, gt=0, le=600)
    """How often the API looks for runs whose lease lapsed."""
    reconcile_interval_s: float = Field(default=30.0, ge=0, le=3600)
    """How often the API compares the runs the database says are queued with the messages the
    broker holds, and sends the missing ones again (``core.dispatch.reconcile``); 0 turns it off
    (for stacks that share one database but not one broker, as the test suite's do)."""
    dispatch_grace_s: float = Field(default=30.0, ge=1, le=3600)
    """How long a queued run's message may be missing from the broker (on its way, or just
    taken by a worker) before the reconciler sends it again."""
    sweep_interval_s: float = Field(default=5.0, gt=0, le=600)
    """How often the API starts a sweep's pending runs when runs of it have ended
    (``core.sweeps.scheduler``: at most ``max_concurrent`` of a sweep's runs are queued or
    running)."""
    sweep_max_runs: int = Field(default=500, ge=1, le=100_000)
    """The most runs (configurations × seeds) one sweep may have; a larger one is refused (422)."""
    retention_days: int = Field(default=30, ge=0)
    """A run finished longer ago than this is compacted (``core.retention``): its progress and
    metrics events are deleted and its long metric series thinned; 0 turns compaction off."""
    retention_max_points: int = Field(default=10_000, ge=1000)
    """The points a compacted run keeps of each metric series at most (at least twice the
    dashboard's 500-point chart, which stays exactly as it was)."""
    retention_interval_s: float = Field(default=3600.0, gt=0)
    """How often the API compacts the runs that are due."""
    worker_deaf_after_s: float = Field(default=60.0, ge=1, le=3600)
    """A worker idle while messages have waited in its queues this long is not consuming (a lost
    broker connection): it stops itself, to be restarted by its supervisor."""
    worker_gpu: bool = False
    """The worker is a GPU worker, as ``marlforge worker --gpu`` starts one: it consumes its
    backends' GPU queues (``<backend>-gpu``, the runs whose spec asks for ``cuda``) first, then
    their plain queues, and refuses to start when a backend's framework sees no GPU."""
    worker_name: str = Field(default="", max_length=200)
    """The worker's identity in leases and in the API (``worker_id``); empty: ``<host>-<pid>``."""
    worker_suites: str = Field(default="", max_length=2000, pattern=r"^[a-z0-9_, ]*$")
    """The environment suites this worker serves, comma-separated (``mpe,lbf``); empty: every
    suite it can build (whose packages are installed on its host). A worker that receives a run
    of a suite it does not serve hands it back to the queue, and the run says what it waits for
    while no live worker of its backend serves its suite (docs/environments.md)."""
    shutdown_grace_s: float = Field(default=90.0, gt=0)
    """``marlforge up``: how long to wait for the API and worker to stop before killing them."""
    log_level: str = "INFO"
    """Log level of the API and the workers."""
    run_memory_mb: int = Field(default=4096, ge=64)
    """The memory one run may use, in MiB: a spec whose estimate exceeds it is refused at
    submission, and a run whose process grows past it is stopped by its worker and failed."""
    run_max_checkpoints: int = Field(default=10_000, ge=1)
    """The most checkpoints one run may write (``total_steps / checkpoint.every_steps``); a spec
    past it is refused at submission (a 422 naming ``checkpoint.every_steps``)."""
    run_max_checkpoint_mb: int = Field(default=32_768, ge=1)
    """The MiB of checkpoints one run may keep at once (``checkpoint.keep_last``, plus the best,
    times the networks and the replay buffer a checkpoint holds): a spec whose estimate is past
    it is refused at submission (a 422 naming ``checkpoint.keep_last``), and a run whose
    checkpoint would take its kept files past it is failed with the reason, its earlier
    checkpoints kept."""
    project_max_artifact_mb: int = Field(default=262_144, ge=1)
    """The MiB of checkpoints one project may keep in the artifact store, over all its runs
    (256 GiB by default): a submission whose runs' estimated checkpoints would take the project
    past it is refused (429), and a run whose checkpoint would is failed with the reason, its
    earlier checkpoints kept. ``run_max_checkpoint_mb`` bounds one run's the same way."""
    cancel_grace_s: float = Field(default=60.0, gt=0)
    """How long a running job has to honour a cancel before its worker kills it."""
    worker_threads: int = Field(default=1, ge=1, le=1024)
    """CPU threads each deep-learning framework in a worker may use (OpenMP, MKL, OpenBLAS,
    TensorFlow's pools, the learners' per-op threads), set when the worker starts. The networks
    are small: one thread per run, and more workers for more runs, uses the cores best."""

    worker_heartbeat_file: Path = Path()
    """The file a worker rewrites while it is connected and its broker answers, which
    ``marlforge worker-health`` checks (``workers.health``); empty: ``<var_dir>/worker.heartbeat``.
    One per worker: workers that share a var folder need one each."""
    worker_heartbeat_interval_s: float = Field(default=5.0, gt=0, le=300)
    """How often a worker rewrites its heartbeat file."""
    worker_heartbeat_stale_s: float = Field(default=30.0, gt=0, le=3600)
    """``marlforge worker-health``: a heartbeat older than this is a worker that is not healthy
    (at least twice the interval). The API counts a worker in the ``workers`` registry as live
    while its row was seen within this long (``core.fleet.registry``); the worker refreshes its row
    every ``worker_heartbeat_interval_s``."""

    @model_validator(mode="after")
    def _check_queue_prefix(self) -> Settings:
        if any(c.isspace() or c == "," for c in self.queue_prefix):
            raise ValueError("queue_prefix may not contain whitespace or commas")
        if self.lease_ttl_s < 3 * self.poll_interval_s:
            raise ValueError(
                "lease_ttl_s must be at least three poll intervals (poll_interval_s), or a slow "
                "renewal would look like a lost worker"
            )
        return self

    @model_validator(mode="after")
    def _check_heartbeat(self) -> Settings:
        if self.worker_heartbeat_stale_s < 2 * self.worker_heartbeat_interval_s:
            raise ValueError(
                "worker_heartbeat_stale_s must be at least two heartbeat intervals "
                "(worker_heartbeat_interval_s), or one late beat would look like a dead worker"
            )
        return self

    @model_validator(mode="before")
    @classmethod
    def _fill_var_defaults(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        var_dir = Path(data.get("var_dir") or "var").expanduser().resolve()
        data["var_dir"] = var_dir
        if not data.get("database_url"):
            data["database_url"] = f"sqlite:///{var_dir / 'marlforge.db'}"
        _fill_artifacts(data, var_dir)
        if not data.get("worker_heartbeat_file"):
            data["worker_heartbeat_file"] = var_dir / "worker.heartbeat"
        data["worker_heartbeat_file"] = Path(data["worker_heartbeat_file"]).expanduser().resolve()
        return data

    @property
    def broker_dir(self) -> Path:
        """The embedded broker's folders (used only with ``filesystem://``)."""
        return self.var_dir / "broker"

    @property
    def visibility_timeout_s(self) -> int:
        """Seconds before an unacknowledged message is handed out again: above the longest run."""
        return self.run_time_limit_s + 3600

    @property
    def uses_embedded_broker(self) -> bool:
        """True when the broker is the filesystem transport under ``var_dir``."""
        return self.broker_url.startswith("filesystem://")


def _fill_artifacts(data: dict[str, Any], var_dir: Path) -> None:
    """``artifacts_url`` from ``artifacts_dir`` (the filesystem shortcut) or the other way round;
    the two may not name different stores."""
    url = str(data.get("artifacts_url") or "")
    named_dir = data.get("artifacts_dir") or None
    if url.startswith("s3://"):
        if not urlparse(url).netloc:
            raise ValueError(f"artifacts_url {url!r} names no bucket (s3://bucket/prefix)")
        if named_dir is not None:
            raise ValueError("set artifacts_url or artifacts_dir, not both: they differ")
        data["artifacts_dir"] = var_dir / "artifacts"
        return
    if url:
        parts = urlparse(url)
        if parts.scheme != "file" or parts.netloc or not parts.path.startswith("/"):
            raise ValueError(
                f"artifacts_url {url!r} must be file:///absolute/path or s3://bucket/prefix"
            )
        folder = Path(unquote(parts.path)).resolve()
        if named_dir is not None and Path(named_dir).expanduser().resolve() != folder:
            raise ValueError("set artifacts_url or artifacts_dir, not both: they differ")
    else:
        folder = Path(named_dir or var_dir / "artifacts").expanduser().resolve()
    data["artifacts_dir"] = folder
    data["artifacts_url"] = folder.as_uri()


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process's settings, read from the environment once."""
    return Settings()
