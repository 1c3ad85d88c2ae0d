"""The bodies of ``/v1/session``: the dashboard's sign-in."""

from __future__ import annotations

from pydantic import BaseModel, Field


class SignIn(BaseModel):
    """What the sign-in page sends."""

    credential: str = Field(
        min_length=1,
        max_length=200,
        description="An API key (`mfk_...`) or a one-time login token (`mfl_...`, from the "
        "URL `marlforge up` prints).",
    )


class SessionOut(BaseModel):
    """The signed-in identity."""

    project: str = Field(description="The project's name.")
    key_id: str
    key_name: str
    role: str = Field(description="`viewer`, `member` or `admin`.")
