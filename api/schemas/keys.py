"""The bodies of the key routes (``/v1/projects/{project}/keys``) and ``/v1/whoami``."""

from __future__ import annotations

import datetime as dt

from pydantic import BaseModel, Field

from core.enums import Role
from core.models import ApiKey
from learners.api import Label


class KeyOut(BaseModel):
    """An API key as listed: never the key itself, which is shown once, when it is created."""

    id: str
    name: str = Field(description="A label for people.")
    role: Role = Field(description="`viewer`, `member` or `admin`.")
    prefix: str = Field(description="The key's first characters, to recognise it (`mfk_AbCd1234`).")
    project: str = Field(description="The project's name.")
    created_at: dt.datetime
    created_by_key_id: str | None = Field(description="The key that created it (null: the CLI).")
    last_used_at: dt.datetime | None = Field(description="Its last request (to the minute).")
    revoked_at: dt.datetime | None = Field(description="When it was revoked; null while live.")

    @classmethod
    def of(cls, row: ApiKey, project: str) -> KeyOut:
        """The response for a database row."""
        return cls(
            id=row.id,
            name=row.name,
            role=row.role,
            prefix=row.prefix,
            project=project,
            created_at=row.created_at,
            created_by_key_id=row.created_by_key_id,
            last_used_at=row.last_used_at,
            revoked_at=row.revoked_at,
        )


class KeyList(BaseModel):
    """A project's keys, revoked ones included, oldest first."""

    items: list[KeyOut]


class NewKey(BaseModel):
    """A key to create."""

    name: Label = Field(
        min_length=1, max_length=100, description="A label for people: one line of printable text."
    )
    role: Role = Field(description="`viewer`, `member` or `admin`.")


class CreatedKeyOut(BaseModel):
    """A new key. `token` is the key itself: it is shown this once and never stored."""

    key: KeyOut
    token: str = Field(description="Send it as `Authorization: Bearer <token>`.")


class WhoAmI(BaseModel):
    """The caller: their key and its project."""

    project: str = Field(description="The project's name.")
    project_id: str
    key: KeyOut
    via: str = Field(description="`key` (the Authorization header) or `session` (the cookie).")
