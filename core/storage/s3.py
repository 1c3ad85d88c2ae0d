"""The artifact store as an S3-compatible bucket (``s3://bucket/prefix``), through boto3.

AWS S3, MinIO or any S3-protocol server (``MARLFORGE_S3_ENDPOINT_URL``); credentials come from
boto3's usual chain (``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, a profile, an instance role).
boto3 does the signing, the multipart uploads and the retries (its ``standard`` mode: three
attempts with jittered exponential backoff; ``AWS_MAX_ATTEMPTS`` and ``AWS_RETRY_MODE`` change it).

Whole or nothing: ``put`` writes and hashes a local file first, then hands it to
``upload_file``. A PUT is atomic in S3; a multipart upload (above ``multipart_threshold``) becomes
an object only when it is completed, and boto3 aborts it when a part fails, so a failed upload
leaves nothing under the key. One whose abort could not reach the store (the store went away)
leaves invisible parts, which ``remove_partials`` aborts later; a bucket lifecycle rule
(``AbortIncompleteMultipartUpload``) is the backstop.
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import boto3
from boto3.exceptions import Boto3Error
from boto3.s3.transfer import TransferConfig
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from core.storage.base import (
    CHUNK,
    TEMP_PREFIX,
    ObjectCorrupt,
    ObjectMissing,
    StoredObject,
    StoreError,
    UploadFailed,
    check_key,
    check_prefix,
    content_disposition,
    written,
)

_MISSING = {"404", "NoSuchKey", "NotFound"}
_FAILURES = (BotoCoreError, ClientError, Boto3Error)


def parse_s3_url(url: str) -> tuple[str, str]:
    """``s3://bucket/prefix`` as (bucket, prefix without slashes at either end)."""
    parts = urlparse(url)
    if parts.scheme != "s3" or not parts.netloc:
        raise ValueError(f"{url!r} is not an s3://bucket/prefix URL")
    return parts.netloc, parts.path.strip("/")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, ClientError):
        error = exc.response.get("Error", {})
        return f"{error.get('Code', '?')}: {error.get('Message') or exc}"
    return str(exc) or type(exc).__name__


def _is_missing(exc: ClientError) -> bool:
    return str(exc.response.get("Error", {}).get("Code")) in _MISSING


class S3Store:
    """Objects under ``prefix`` in one bucket."""

    def __init__(
        self,
        url: str,
        *,
        endpoint_url: str | None = None,
        public_endpoint_url: str | None = None,
        cache_dir: Path,
        multipart_threshold: int = 8 << 20,
        multipart_chunksize: int = 8 << 20,
    ) -> None:
        """``cache_dir``: this host's folder for uploads in progress and downloaded copies. Files
        above ``multipart_threshold`` go up in parts of ``multipart_chunksize``, several at once
        (boto3's defaults). ``public_endpoint_url``: the endpoint as the API's clients reach it,
        for presigned URLs, when it is not ``endpoint_url`` (a MinIO known inside the deployment
        as ``http://minio:9000``); a presigned URL's signature covers its host, so it is signed
        for that host."""
        self.bucket, self.prefix = parse_s3_url(url)
        self.url = f"s3://{self.bucket}/{self.prefix}".rstrip("/")
        self.endpoint_url = endpoint_url or None
        self.public_endpoint_url = public_endpoint_url or None
        self.cache_dir = cache_dir.resolve()
        self.multipart_threshold = multipart_threshold
        self.multipart_chunksize = multipart_chunksize
        self._transfer = TransferConfig(
            multipart_threshold=multipart_threshold, multipart_chunksize=multipart_chunksize
        )
        self._lock = threading.Lock()
        self._clients: dict[tuple[bool, str | None], Any] = {}

    def __reduce__(self) -> tuple[Any, ...]:
        # A run's process gets the store pickled: it makes its own clients from the same settings.
        args = (self.url, self.endpoint_url, self.public_endpoint_url, self.cache_dir,
                self.multipart_threshold, self.multipart_chunksize)  # fmt: skip
        return (_rebuild, args)

    def locate(self, key: str) -> str:
        return f"s3://{self.bucket}/{self._key(key)}"

    def put(self, key: str, write: Callable[[Path], None]) -> StoredObject:
        full = self._key(key)
        scratch = self.cache_dir / "uploads" / key
        scratch.parent.mkdir(parents=True, exist_ok=True)
        fd, temp_name = tempfile.mkstemp(dir=scratch.parent, prefix=TEMP_PREFIX, suffix=".part")
        os.close(fd)
        temp = Path(temp_name)
        try:
            write(temp)
            size, sha256 = written(temp)
            try:
                self._client().upload_file(
                    temp_name, self.bucket, full, Config=self._transfer,
                    ExtraArgs={"Metadata": {"sha256": sha256}},
                )  # fmt: skip
            except _FAILURES as exc:
                raise UploadFailed(self.locate(key), _reason(exc)) from exc
        finally:
            temp.unlink(missing_ok=True)
        return StoredObject(key, size, sha256)

    def stat(self, key: str) -> int | None:
        try:
            head = self._client().head_object(Bucket=self.bucket, Key=self._key(key))
        except ClientError as exc:
            if _is_missing(exc):
                return None
            raise self._error("stat", key, exc) from exc
        except _FAILURES as exc:
            raise self._error("stat", key, exc) from exc
        return int(head["ContentLength"])

    def read(self, key: str, start: int = 0, stop: int | None = None) -> Iterator[bytes]:
        options: dict[str, Any] = {}
        if start or stop is not None:
            options["Range"] = f"bytes={start}-{'' if stop is None else stop - 1}"
        try:
            body = self._client().get_object(Bucket=self.bucket, Key=self._key(key), **options)
        except ClientError as exc:
            if _is_missing(exc):
                raise ObjectMissing(f"no object at {self.locate(key)}") from None
            raise self._error("read", key, exc) from exc
        except _FAILURES as exc:
            raise self._error("read", key, exc) from exc
        return _chunks(body["Body"])

    def download(self, key: str, dest: Path) -> None:
        dest.parent.mkdir(parents=True, exist_ok=True)
        temp = dest.with_name(f"{TEMP_PREFIX}{dest.name}")
        try:
            self._client().download_file(
                self.bucket, self._key(key), str(temp), Config=self._transfer
            )
            os.replace(temp, dest)
        except ClientError as exc:
            if _is_missing(exc):
                raise ObjectMissing(f"no object at {self.locate(key)}") from None
            raise self._error("download", key, exc) from exc
        except _FAILURES as exc:
            raise self._error("download", key, exc) from exc
        finally:
            temp.unlink(missing_ok=True)

    def delete(self, key: str) -> None:
        try:
            self._client().delete_object(Bucket=self.bucket, Key=self._key(key))
        except _FAILURES as exc:
            raise self._error("delete", key, exc) from exc

    def list(self, prefix: str) -> list[str]:
        full = self._prefixed(prefix)
        keys: list[str] = []
        try:
            pages = self._client().get_paginator("list_objects_v2")
            for page in pages.paginate(Bucket=self.bucket, Prefix=full):
                keys.extend(self._relative(item["Key"]) for item in page.get("Contents", []))
        except _FAILURES as exc:
            raise self._error("list", prefix, exc) from exc
        return sorted(keys)

    def remove_partials(self, prefix: str) -> int:
        removed = 0
        try:
            client = self._client()
            pages = client.get_paginator("list_multipart_uploads")
            for page in pages.paginate(Bucket=self.bucket, Prefix=self._prefixed(prefix)):
                for upload in page.get("Uploads", []):
                    client.abort_multipart_upload(
                        Bucket=self.bucket, Key=upload["Key"], UploadId=upload["UploadId"]
                    )
                    removed += 1
        except _FAILURES as exc:
            raise self._error("clean up", prefix, exc) from exc
        scratch = self.cache_dir / "uploads" / prefix
        if scratch.is_dir():
            for leftover in scratch.rglob(f"{TEMP_PREFIX}*"):
                leftover.unlink(missing_ok=True)
                removed += 1
        return removed

    def unreachable_reason(self) -> str | None:
        where = f" at {self.endpoint_url}" if self.endpoint_url else ""
        try:
            self._client(quick=True).head_bucket(Bucket=self.bucket)
        except ClientError as exc:
            if _is_missing(exc) or "NoSuchBucket" in str(exc):
                return f"bucket {self.bucket!r} does not exist{where}"
            return f"{self.url}: {_reason(exc)}"
        except _FAILURES as exc:
            return f"{self.url} unreachable{where}: {_reason(exc)}"
        return None

    def create(self) -> str:
        client = self._client()
        try:
            client.head_bucket(Bucket=self.bucket)
            return f"bucket {self.bucket!r} exists"
        except ClientError as exc:
            if not (_is_missing(exc) or "NoSuchBucket" in str(exc)):
                raise self._error("check the bucket of", "", exc) from exc
        except _FAILURES as exc:
            raise self._error("reach", "", exc) from exc
        region = client.meta.region_name
        # Outside us-east-1, AWS wants the bucket's region said again.
        where = {} if region in (None, "us-east-1") else {
            "CreateBucketConfiguration": {"LocationConstraint": region}
        }  # fmt: skip
        try:
            client.create_bucket(Bucket=self.bucket, **where)
        except _FAILURES as exc:
            raise self._error("create the bucket of", "", exc) from exc
        return f"created bucket {self.bucket!r}"

    def presign(self, key: str, *, sha256: str, expires_s: int, filename: str | None) -> str:
        try:
            head = self._client().head_object(Bucket=self.bucket, Key=self._key(key))
        except ClientError as exc:
            if _is_missing(exc):
                raise ObjectMissing(f"no object at {self.locate(key)}") from None
            raise self._error("stat", key, exc) from exc
        except _FAILURES as exc:
            raise self._error("stat", key, exc) from exc
        # Every object ``put`` wrote carries its sha256; one that says another is not the
        # recorded object. (An object written by other means has none: its size was checked.)
        stored = head.get("Metadata", {}).get("sha256")
        if stored is not None and stored != sha256:
            raise ObjectCorrupt(self.locate(key), sha256, stored)
        params: dict[str, Any] = {"Bucket": self.bucket, "Key": self._key(key)}
        if filename is not None:
            params["ResponseContentDisposition"] = content_disposition(filename)
        try:
            url: str = self._client(endpoint=self.public_endpoint_url).generate_presigned_url(
                "get_object", Params=params, ExpiresIn=expires_s
            )
        except _FAILURES as exc:
            raise self._error("sign a URL of", key, exc) from exc
        return url

    def _key(self, key: str) -> str:
        check_key(key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _prefixed(self, prefix: str) -> str:
        check_prefix(prefix)
        return f"{self.prefix}/{prefix}" if self.prefix else prefix

    def _relative(self, full: str) -> str:
        return full[len(self.prefix) + 1 :] if self.prefix else full

    def _error(self, action: str, key: str, exc: BaseException) -> StoreError:
        where = f"{self.url}/{key}" if key else self.url
        return StoreError(f"could not {action} {where}: {_reason(exc)}")

    def _client(self, *, quick: bool = False, endpoint: str | None = None) -> Any:
        """boto3's S3 client (thread-safe), made once. ``quick``: one attempt and short
        timeouts, for a readiness check that must answer within a probe's timeout. ``endpoint``:
        another endpoint than ``endpoint_url`` (the public one, to sign URLs for)."""
        endpoint = endpoint or self.endpoint_url
        with self._lock:
            client = self._clients.get((quick, endpoint))
            if client is None:
                config = Config(
                    connect_timeout=3 if quick else 10,
                    read_timeout=5 if quick else 60,
                    retries={"total_max_attempts": 1} if quick else None,
                    # Non-AWS servers (MinIO, test servers) are addressed by path.
                    s3={"addressing_style": "path"} if endpoint else None,
                    # Signature version 4, which every region and S3-compatible server accepts
                    # (version 2 presigned URLs are refused by newer regions).
                    signature_version="s3v4",
                )
                session = boto3.session.Session()
                client = session.client("s3", endpoint_url=endpoint, config=config)
                self._clients[(quick, endpoint)] = client
            return client


def _rebuild(
    url: str,
    endpoint_url: str | None,
    public_endpoint_url: str | None,
    cache_dir: Path,
    threshold: int,
    chunksize: int,
) -> S3Store:
    return S3Store(
        url, endpoint_url=endpoint_url, public_endpoint_url=public_endpoint_url,
        cache_dir=cache_dir, multipart_threshold=threshold, multipart_chunksize=chunksize,
    )  # fmt: skip


def _chunks(body: Any) -> Iterator[bytes]:
    try:
        yield from body.iter_chunks(CHUNK)
    finally:
        body.close()
