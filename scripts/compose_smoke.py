"""The docker-compose deployment, run for real on one machine that reaches no image registry
(docs/deployment.md, "Running it here"). Run as root: ``bash scripts/compose-smoke.sh``.

Each step prints its time; the first that fails prints its logs and the script exits 1, after
taking the deployment down. The steps:

 1. engine: Docker's engine (``docker.io``) and debootstrap from Debian's packages when missing,
    and Compose v2 (``docker compose``) from Debian 13's ``docker-compose`` package when the
    client has none (Debian 12's ``docker-compose`` is Compose v1, which reads no ``name:``);
    ``dockerd`` started when it is not running (and stopped again at the end).
 2. base image: ``marlforge-base:bookworm``, made by debootstrap from Debian's packages (Python
    3.11 in a virtualenv on the PATH, the host's CA certificates), then ``docker import``.
 3. stores image: docker/smoke/stores.Dockerfile (PostgreSQL and Redis from Debian's packages,
    moto's S3 server from PyPI).
 4. project images: the compose file's own builds of the API and PyTorch worker images on that
    base, PyTorch's CPU wheel taken from the machine's copy (PIP_FIND_LINKS) when it has one.
 5. up: ``docker compose up --wait`` of the API and the PyTorch worker, with what they depend on
    (the stores, the migration job, the bucket job), until every service is healthy.
 6. key: ``docker compose run --rm api marlforge keys create``.
 7. first run: a run submitted over HTTP trains on the worker container; its checkpoints are
    downloaded and their sha256 checked against the listing.
 8. takeover: the worker container is ``docker kill``ed mid-run; compose's restart policy brings
    it back, and the run is taken over from its last checkpoint and succeeds.
 9. another host: docker/docker-compose.gpu-worker.yml as a second project sharing only the URLs
    of the database, broker and store. As a GPU worker it refuses to start (exit 2, with the
    reason) since no GPU is visible; as a CPU worker it takes a run while the first project's
    worker is stopped.
10. down: ``docker compose down -v`` of both projects leaves no container, network or volume.

Only the standard library: it runs before any virtualenv exists.
"""

from __future__ import annotations

import functools
import hashlib
import http.server
import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DOCKER = ROOT / "docker"
SMOKE = DOCKER / "smoke"
PROJECT = "marlforge-smoke"
GPU_PROJECT = "marlforge-smoke-gpu"
BASE_IMAGE = "marlforge-base:bookworm"
STORES_IMAGE = "marlforge-smoke-stores:1"
API = "http://127.0.0.1:8000"
DEBIAN_MIRROR = os.environ.get("SMOKE_DEBIAN_MIRROR", "http://deb.debian.org/debian")
# Below the ephemeral range (32768-60999), where a test's free port or an outgoing connection could
# take them.
PORTS = {"SMOKE_PG_PORT": 25432, "SMOKE_REDIS_PORT": 26379, "SMOKE_S3_PORT": 29000}
WHEEL_INDEX_PORT = 28080

timings: list[tuple[str, float]] = []


class StepFailed(Exception):
    """A step's check failed; its message says which."""


def log(message: str) -> None:
    print(message, flush=True)


def run(
    args: list[str],
    *,
    check: bool = True,
    capture: bool = False,
    timeout: float = 1800,
    env: dict[str, str] | None = None,
    cwd: Path = ROOT,
) -> subprocess.CompletedProcess[str]:
    """A command, its output to ours unless captured; a failure raises StepFailed with its tail."""
    done = subprocess.run(
        args,
        cwd=cwd,
        text=True,
        capture_output=capture,
        timeout=timeout,
        env={**os.environ, **(env or {})},
    )
    if check and done.returncode != 0:
        tail = ((done.stdout or "") + (done.stderr or ""))[-4000:]
        raise StepFailed(f"{' '.join(args)} exited {done.returncode}\n{tail}")
    return done


@contextmanager
def step(name: str) -> Iterator[None]:
    log(f"==> {name}")
    started = time.monotonic()
    try:
        yield
    except BaseException:
        log(f"!!! {name} failed after {time.monotonic() - started:.1f} s")
        raise
    seconds = time.monotonic() - started
    timings.append((name, seconds))
    log(f"<== {name}: {seconds:.1f} s")


class Compose:
    """``docker compose`` for one project: its files and the env file it interpolates."""

    def __init__(self, project: str, files: list[Path], env_file: Path) -> None:
        self.base = ["docker", "compose", "-p", project, "--env-file", str(env_file)]
        for file in files:
            self.base += ["-f", str(file)]
        self.project = project

    def __call__(self, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
        return run([*self.base, *args], **kwargs)

    def container(self, service: str) -> str:
        ids = self("ps", "-q", service, capture=True).stdout.split()
        if len(ids) != 1:
            raise StepFailed(f"{service}: {len(ids)} containers, not 1")
        return ids[0]

    def logs(self) -> str:
        done = run([*self.base, "logs", "--no-color", "--tail", "80"], check=False, capture=True)
        return done.stdout + done.stderr


# -- 1. engine ---------------------------------------------------------------------------------


def apt_install(*packages: str) -> None:
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    run(["apt-get", "update", "-q"], env=env, capture=True)
    run(["apt-get", "install", "-y", "-q", *packages], env=env, capture=True)


def install_compose_v2(work: Path) -> None:
    """Compose v2 from Debian 13's package, read through a private apt state (the host's sources
    are left as they are); it needs only libc."""
    lists, cache = work / "apt" / "lists", work / "apt" / "cache"
    (lists / "partial").mkdir(parents=True, exist_ok=True)
    (cache / "archives" / "partial").mkdir(parents=True, exist_ok=True)
    sources = work / "apt" / "sources.list"
    sources.write_text(
        "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] "
        f"{DEBIAN_MIRROR} trixie main\n"
    )
    options = [
        "-o", f"Dir::Etc::SourceList={sources}", "-o", "Dir::Etc::SourceParts=/dev/null",
        "-o", f"Dir::State::Lists={lists}", "-o", f"Dir::Cache={cache}",
    ]  # fmt: skip
    run(["apt-get", *options, "update", "-q"], capture=True)
    folder = work / "apt" / "debs"
    folder.mkdir(exist_ok=True)
    run(["apt-get", *options, "download", "docker-compose/trixie"], capture=True, cwd=folder)
    debs = sorted(folder.glob("docker-compose_2*.deb"))
    if not debs:
        raise StepFailed("Debian 13's docker-compose package was not downloaded")
    run(["dpkg", "-i", str(debs[-1])], capture=True)


def engine_ready() -> bool:
    return run(["docker", "info"], check=False, capture=True, timeout=30).returncode == 0


def ensure_engine(work: Path) -> subprocess.Popen[bytes] | None:
    """Install what is missing, start dockerd if it is not running; the dockerd started here."""
    missing = [
        package
        for binary, package in (("dockerd", "docker.io"), ("debootstrap", "debootstrap"))
        if shutil.which(binary) is None
    ]
    if missing or shutil.which("docker") is None:
        apt_install(*missing, *([] if shutil.which("docker") else ["docker.io"]))
    compose = run(["docker", "compose", "version"], check=False, capture=True)
    if compose.returncode != 0 or not re.search(r"v?2\.\d+", compose.stdout):
        install_compose_v2(work)
    log(run(["docker", "compose", "version"], capture=True).stdout.strip())
    if engine_ready():
        return None
    dockerd_log = open(work / "dockerd.log", "wb")  # noqa: SIM115 (open for dockerd's lifetime)
    dockerd = subprocess.Popen(
        ["dockerd"], stdout=dockerd_log, stderr=subprocess.STDOUT, start_new_session=True
    )
    deadline = time.monotonic() + 60
    while not engine_ready():
        if dockerd.poll() is not None or time.monotonic() > deadline:
            raise StepFailed(
                f"dockerd did not start:\n{(work / 'dockerd.log').read_text()[-3000:]}"
            )
        time.sleep(0.5)
    return dockerd


def stop_engine(dockerd: subprocess.Popen[bytes]) -> None:
    dockerd.terminate()
    try:
        dockerd.wait(timeout=60)
    except subprocess.TimeoutExpired:
        dockerd.kill()
        dockerd.wait()


# -- 2-4. images -------------------------------------------------------------------------------


def image_exists(tag: str) -> bool:
    return run(["docker", "image", "inspect", tag], check=False, capture=True).returncode == 0


def build_base_image(work: Path) -> None:
    """Debian 12 from Debian's packages, with Python in a virtualenv that is first on the PATH (so
    ``python`` and ``pip`` are what the official image gives) and the host's CA certificates (pip
    then trusts what the host trusts); kept once built."""
    if image_exists(BASE_IMAGE):
        log(f"{BASE_IMAGE} is already built")
        return
    rootfs = work / "rootfs"
    run(
        [
            "debootstrap", "--variant=minbase", "--include=python3,python3-venv,ca-certificates",
            "bookworm", str(rootfs), DEBIAN_MIRROR,
        ],
        capture=True,
    )  # fmt: skip
    local_cas = Path("/usr/local/share/ca-certificates")
    for cert in local_cas.glob("*.crt"):
        shutil.copy(cert, rootfs / "usr/local/share/ca-certificates" / cert.name)
    run(["chroot", str(rootfs), "update-ca-certificates"], capture=True)
    run(["chroot", str(rootfs), "python3", "-m", "venv", "/usr/local/python"], capture=True)
    for cache in ("var/lib/apt/lists", "var/cache/apt/archives"):
        for entry in (rootfs / cache).glob("*"):
            if entry.is_file():
                entry.unlink()
    path = "/usr/local/python/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    changes = [
        f"ENV PATH={path}",
        "ENV VIRTUAL_ENV=/usr/local/python",
        "ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt",
        "ENV LANG=C.UTF-8",
        'CMD ["python3"]',
    ]
    tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
    args = ["docker", "import", *[a for c in changes for a in ("--change", c)], "-", BASE_IMAGE]
    imported = subprocess.run(args, stdin=tar.stdout, capture_output=True, text=True)
    tar.wait()
    if imported.returncode != 0 or tar.returncode != 0:
        raise StepFailed(f"docker import failed: {imported.stderr[-2000:]}")
    shutil.rmtree(rootfs)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    """Serves the index's folder; pip asks it for every project (a 404 sends pip to PyPI), so its
    requests are not logged."""

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 (the base's name)
        pass


class WheelIndex:
    """A PEP 503 index on 127.0.0.1 of the PyTorch wheels in the machine's PIP_FIND_LINKS folders:
    the build's TORCH_INDEX_URL, in the place of PyTorch's own index, which this machine cannot
    reach. None when the machine has no such wheel (the build then asks PyTorch's index)."""

    def __init__(self, work: Path) -> None:
        self.root = work / "wheels"
        folders = [Path(f) for f in os.environ.get("PIP_FIND_LINKS", "").split() if f]
        wheels = [w for f in folders if f.is_dir() for w in f.glob("torch-*.whl")]
        self.url: str | None = None
        if not wheels:
            return
        project = self.root / "simple" / "torch"
        project.mkdir(parents=True)
        links = []
        for wheel in wheels:
            os.symlink(wheel, project / wheel.name)
            links.append(f'<a href="{wheel.name.replace("+", "%2B")}">{wheel.name}</a>')
        (project / "index.html").write_text("<html><body>" + "".join(links) + "</body></html>")
        handler = functools.partial(_QuietHandler, directory=str(self.root))
        # A fixed port: the URL is a build argument, part of the dependency layer's cache key.
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", WHEEL_INDEX_PORT), handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/simple/"


# -- 5-9. the deployment -----------------------------------------------------------------------


def free(port: int) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", port)) != 0


def write_env(work: Path, wheels: WheelIndex) -> Path:
    """docker/.env as an operator fills it in (docker/.env.example), with passwords of its own,
    and the override's SMOKE_* values."""
    values = {}
    for line in (DOCKER / ".env.example").read_text().splitlines():
        if line and not line.startswith("#") and "=" in line:
            name, _, value = line.partition("=")
            values[name] = value or secrets.token_urlsafe(24)
    values.update({name: str(port) for name, port in PORTS.items()})
    values.update(
        SMOKE_BASE_IMAGE=BASE_IMAGE,
        SMOKE_STORES_IMAGE=STORES_IMAGE,
        SMOKE_TORCH_INDEX_URL=wheels.url or "https://download.pytorch.org/whl/cpu",
        SMOKE_GPU_WORKER_ENV=str(work / "gpu-worker.env"),
    )
    path = work / "smoke.env"
    path.write_text("".join(f"{k}={v}\n" for k, v in values.items()))
    path.chmod(0o600)
    return path


def read_env(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines() if "=" in line)


class Http:
    """The deployment's API over HTTP, with a key."""

    def __init__(self, key: str) -> None:
        self.key = key

    def request(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(f"{API}{path}", data=data, method=method)
        request.add_header("authorization", f"Bearer {self.key}")
        if data is not None:
            request.add_header("content-type", "application/json")
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                raw = response.read()
        except urllib.error.HTTPError as error:
            raise StepFailed(f"{method} {path}: {error.code} {error.read()[:2000]!r}") from None
        return raw if path.endswith("/file") else json.loads(raw)

    def wait(
        self, run_id: str, done: Callable[[dict[str, Any]], bool], timeout: float, what: str
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            body: dict[str, Any] = self.request("GET", f"/v1/experiments/{run_id}")
            if done(body):
                return body
            if body["status"] in {"failed", "cancelled"}:
                raise StepFailed(f"run {run_id} {body['status']}: {body.get('status_reason')}")
            if time.monotonic() > deadline:
                raise StepFailed(f"run {run_id} not {what} in {timeout:.0f} s: {body}")
            time.sleep(1)

    def checked_checkpoints(self, run_id: str) -> list[dict[str, Any]]:
        """Every checkpoint of the run, downloaded, its sha256 compared with the listing's."""
        items: list[dict[str, Any]] = self.request("GET", f"/v1/experiments/{run_id}/checkpoints")[
            "items"
        ]
        if not items:
            raise StepFailed(f"run {run_id} has no checkpoint")
        for item in items:
            data = self.request("GET", f"/v1/experiments/{run_id}/checkpoints/{item['id']}/file")
            if hashlib.sha256(data).hexdigest() != item["sha256"]:
                raise StepFailed(f"checkpoint {item['id']} does not match its sha256")
        return items


def spec(name: str, total_steps: int) -> dict[str, Any]:
    """DDPG on Pendulum, small: checkpoints every 400 steps (2 copies of 200-step episodes)."""
    return {
        "name": name,
        "algorithm": "ddpg",
        "backend": "torch",
        "env": {"suite": "gymnasium", "id": "Pendulum-v1", "num_envs": 2},
        "total_steps": total_steps,
        "seed": 7,
        "hyperparameters": {
            "learning_starts": 64,
            "batch_size": 32,
            "hidden_sizes": [32, 32],
            "buffer_size": 10000,
        },
        "evaluation": {"every_steps": 400, "episodes": 1},
        "checkpoint": {"every_steps": 400, "keep_last": 3},
    }


def running_at(step: int, body: dict[str, Any]) -> bool:
    return bool(body["status"] == "running" and body["progress"]["step"] >= step)


def running_after(restarts: int, body: dict[str, Any]) -> bool:
    return bool(body["status"] == "running" and body["restarts"] == restarts)


def kill_main_process(container: str) -> None:
    """SIGKILL the container's first process from the host: every process of it dies and the
    container exits 137 without the engine having been asked to stop it."""
    pid = run(["docker", "inspect", "-f", "{{.State.Pid}}", container], capture=True).stdout
    os.kill(int(pid), signal.SIGKILL)


TAKEOVER = re.compile(r"worker \S+ lost at step [\d,]+; restarting from the checkpoint at step ")


def smoke(work: Path) -> None:
    with step("engine"):
        dockerd = ensure_engine(work)
    try:
        deploy(work)
    finally:
        if dockerd is not None:
            stop_engine(dockerd)


def deploy(work: Path) -> None:
    with step("base image"):
        build_base_image(work)
    with step("stores image"):
        run(
            [
                "docker", "build", "--network", "host", "--build-arg", f"BASE_IMAGE={BASE_IMAGE}",
                "-t", STORES_IMAGE, "-f", str(SMOKE / "stores.Dockerfile"), str(SMOKE),
            ],
            capture=True,
        )  # fmt: skip
    taken = [port for port in [*PORTS.values(), WHEEL_INDEX_PORT, 8000] if not free(port)]
    if taken:
        raise StepFailed(f"ports {taken} on 127.0.0.1 are taken: the deployment needs them")
    wheels = WheelIndex(work)
    env_file = write_env(work, wheels)
    env = read_env(env_file)
    compose = Compose(
        PROJECT, [DOCKER / "docker-compose.yml", SMOKE / "docker-compose.smoke.yml"], env_file
    )
    gpu = Compose(
        GPU_PROJECT,
        [DOCKER / "docker-compose.gpu-worker.yml", SMOKE / "docker-compose.gpu-worker.smoke.yml"],
        env_file,
    )
    failed: StepFailed | None = None
    try:
        scenario(compose, gpu, env, work)
    except StepFailed as error:
        failed = error
        log(f"!!! {error}")
        for project in (compose, gpu):
            log(f"--- logs of {project.project}\n{project.logs()}")
    finally:
        with step("down"):
            for project in (gpu, compose):
                project("down", "-v", "--remove-orphans", "--timeout", "30", capture=True)
            left = [
                c
                for project in (PROJECT, GPU_PROJECT)
                for c in run(
                    [
                        "docker",
                        "ps",
                        "-aq",
                        "--filter",
                        f"label=com.docker.compose.project={project}",
                    ],
                    capture=True,
                ).stdout.split()
            ]
            networks = [
                n
                for n in run(
                    ["docker", "network", "ls", "--format", "{{.Name}}"], capture=True
                ).stdout.split()
                if n.startswith((f"{PROJECT}_", f"{GPU_PROJECT}_"))
            ]
            volumes = [
                v
                for v in run(["docker", "volume", "ls", "-q"], capture=True).stdout.split()
                if v.startswith((f"{PROJECT}_", f"{GPU_PROJECT}_"))
            ]
            if left or volumes or networks:
                failed = failed or StepFailed(
                    f"down left containers {left}, volumes {volumes}, networks {networks}"
                )
    if failed is not None:
        raise failed


def scenario(compose: Compose, gpu: Compose, env: dict[str, str], work: Path) -> None:
    with step("project images"):
        compose("--progress", "plain", "build", "migrate", "worker-torch")
    with step("up to healthy"):
        compose(
            "--progress",
            "plain",
            "up",
            "-d",
            "--wait",
            "--wait-timeout",
            "600",
            "api",
            "worker-torch",
        )
    with step("key"):
        created = compose(
            "run", "--rm", "--no-deps", "api",
            "marlforge", "keys", "create", "--project", "smoke", "--role", "admin",
            "--name", "compose smoke", capture=True,
        )  # fmt: skip
        api = Http(created.stdout.strip().splitlines()[-1])
        api.request("GET", "/v1/experiments")
    with step("first run trained"):
        first = api.request("POST", "/v1/experiments", spec("compose smoke", 1200))["id"]
        api.wait(first, lambda b: b["status"] == "succeeded", 600, "succeeded")
        log(f"{len(api.checked_checkpoints(first))} checkpoints match their sha256")
    with step("takeover after docker kill"):
        run_id = api.request("POST", "/v1/experiments", spec("compose takeover", 4000))["id"]
        worker = compose.container("worker-torch")
        # docker kill: the engine counts it as a stop, which `restart: unless-stopped` leaves
        # stopped; compose starts it again. Then the container's process killed from outside, as
        # the kernel's OOM killer or a crash would: the engine restarts it by the policy.
        faults: list[tuple[str, int, Callable[[], object]]] = [
            ("docker kill", 1000, lambda: run(["docker", "kill", worker], capture=True)),
            ("SIGKILL of the container's process", 2400, lambda: kill_main_process(worker)),
        ]
        for restart, (fault, at_step, inflict) in enumerate(faults, start=1):
            body = api.wait(run_id, functools.partial(running_at, at_step), 600, f"at {at_step}")
            lost_by = body["worker"]["id"]
            inflict()
            killed_at = time.monotonic()
            if restart == 1:
                compose("up", "-d", "--wait", "--wait-timeout", "300", "worker-torch", capture=True)
            body = api.wait(
                run_id, functools.partial(running_after, restart), 600, f"back after {fault}"
            )
            if body["worker"]["id"] == lost_by:
                raise StepFailed(f"the new worker has the lost one's name {lost_by}")
            log(f"{fault}: running again {time.monotonic() - killed_at:.1f} s later")
        timeline = api.request("GET", f"/v1/experiments/{run_id}/timeline")["items"]
        takeovers = [
            r for r in (item.get("reason") or "" for item in timeline) if TAKEOVER.match(r)
        ]
        if len(takeovers) != len(faults):
            raise StepFailed(f"{len(takeovers)} takeovers in the timeline, not {len(faults)}")
        log("\n".join(takeovers))
        done = api.wait(run_id, lambda b: b["status"] == "succeeded", 600, "succeeded")
        if done["restarts"] != len(faults):
            raise StepFailed(f"restarts {done['restarts']}, not {len(faults)}")
        api.checked_checkpoints(run_id)
        restarted = run(["docker", "inspect", "-f", "{{.RestartCount}}", worker], capture=True)
        if restarted.stdout.strip() != "1":
            raise StepFailed(f"the engine restarted the worker {restarted.stdout.strip()} times")
    with step("another host"):
        another_host(compose, gpu, env, api, work)


def another_host(
    compose: Compose, gpu: Compose, env: dict[str, str], api: Http, work: Path
) -> None:
    """docker-compose.gpu-worker.yml from URLs alone (gpu-worker.env.example, filled in)."""
    urls = {
        "MARLFORGE_DATABASE_URL": f"postgresql+psycopg://marlforge:{env['POSTGRES_PASSWORD']}"
        f"@127.0.0.1:{env['SMOKE_PG_PORT']}/marlforge",
        "MARLFORGE_BROKER_URL": f"redis://:{env['REDIS_PASSWORD']}@127.0.0.1:"
        f"{env['SMOKE_REDIS_PORT']}/0",
        "MARLFORGE_ARTIFACTS_URL": "s3://marlforge/artifacts",
        "MARLFORGE_S3_ENDPOINT_URL": f"http://127.0.0.1:{env['SMOKE_S3_PORT']}",
        "AWS_ACCESS_KEY_ID": env["S3_ACCESS_KEY_ID"],
        "AWS_SECRET_ACCESS_KEY": env["S3_SECRET_ACCESS_KEY"],
    }
    example = read_env(DOCKER / "gpu-worker.env.example")
    if set(example) != set(urls):
        raise StepFailed(f"gpu-worker.env.example names {sorted(example)}, not {sorted(urls)}")
    path = Path(env["SMOKE_GPU_WORKER_ENV"])
    path.write_text("".join(f"{k}={v}\n" for k, v in urls.items()))
    path.chmod(0o600)
    gpu("build", capture=True)
    refused = gpu("run", "--rm", "worker-torch-gpu", check=False, capture=True, timeout=300)
    said = refused.stdout + refused.stderr
    if refused.returncode != 2 or "GPU" not in said:
        raise StepFailed(f"the GPU worker exited {refused.returncode}, not 2: {said[-2000:]}")
    log(f"as a GPU worker it refused: {said.strip().splitlines()[-1]}")
    compose("stop", "worker-torch", capture=True)
    gpu(
        "run", "-d", "--name", f"{GPU_PROJECT}-cpu", "worker-torch-gpu",
        "marlforge", "worker", "--backend", "torch", capture=True,
    )  # fmt: skip
    run_id = api.request("POST", "/v1/experiments", spec("compose another host", 800))["id"]
    done = api.wait(run_id, lambda b: b["status"] == "succeeded", 600, "succeeded")
    log(f"taken by {done['worker']['id']} with the first project's worker stopped")
    api.checked_checkpoints(run_id)


def main() -> int:
    if os.geteuid() != 0:
        log("compose-smoke: run as root (it installs packages and starts dockerd)")
        return 2
    work = Path(tempfile.mkdtemp(prefix="marlforge-compose-smoke-"))
    started = time.monotonic()
    try:
        smoke(work)
    except (StepFailed, subprocess.TimeoutExpired) as error:
        log(f"compose-smoke FAILED: {error}")
        return 1
    finally:
        for name, seconds in timings:
            log(f"  {name:<28} {seconds:8.1f} s")
        log(f"  {'total':<28} {time.monotonic() - started:8.1f} s")
        shutil.rmtree(work, ignore_errors=True)
    log("compose-smoke passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
