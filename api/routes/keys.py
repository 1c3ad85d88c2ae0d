"""``/v1/projects/{project}/keys`` (admins manage their project's keys) and ``/v1/whoami``."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Path

from api.auth import AdminDep, PrincipalDep, project_router
from api.deps import ServicesDep, SessionDep
from api.errors import ApiError, error_responses
from api.schemas.keys import CreatedKeyOut, KeyList, KeyOut, NewKey, WhoAmI
from core import auth
from core.auth.repository import KeyRepository, ProjectRepository
from core.ids import is_id

router = project_router("/v1", ["keys"])

ProjectName = Annotated[
    str, Path(min_length=1, max_length=64, description="The project's name, e.g. `default`.")
]


def own_project(project: ProjectName, principal: AdminDep) -> str:
    """The path's project, which must be the caller's: another project is not found."""
    if project != principal.project_name:
        raise ApiError(404, "not_found", f"no project {project!r}")
    return principal.project_id


OwnProject = Annotated[str, Depends(own_project)]


@router.get(
    "/whoami",
    response_model=WhoAmI,
    summary="Who am I",
    description="The key the request was made with, its role and its project.",
)
def whoami(principal: PrincipalDep, session: SessionDep) -> WhoAmI:
    row = KeyRepository(session).get(principal.key_id)
    assert row is not None
    return WhoAmI(
        project=principal.project_name,
        project_id=principal.project_id,
        key=KeyOut.of(row, principal.project_name),
        via=principal.via,
    )


@router.get(
    "/projects/{project}/keys",
    response_model=KeyList,
    summary="List a project's keys",
    description="Admins only. Every key of the project, revoked ones included, oldest first.",
    responses=error_responses(404, 422),
)
def list_keys(project_id: OwnProject, principal: AdminDep, session: SessionDep) -> KeyList:
    rows = auth.list_keys(session, project_id)
    return KeyList(items=[KeyOut.of(r, principal.project_name) for r in rows])


@router.post(
    "/projects/{project}/keys",
    status_code=201,
    response_model=CreatedKeyOut,
    summary="Create a key",
    description="Admins only. Returns the new key once, in `token`; only its hash is stored.",
    responses=error_responses(400, 404, 413, 415, 422),
)
def create_key(
    project_id: OwnProject,
    principal: AdminDep,
    request: NewKey,
    session: SessionDep,
    services: ServicesDep,
) -> CreatedKeyOut:
    project = ProjectRepository(session).get(project_id)
    assert project is not None
    created = auth.create_key(
        session, services.secret, project, request.role, request.name, principal.key_id
    )
    session.commit()
    return CreatedKeyOut(key=KeyOut.of(created.key, project.name), token=created.token)


@router.delete(
    "/projects/{project}/keys/{key_id}",
    response_model=KeyOut,
    summary="Revoke a key",
    description="Admins only. The key stops working from the next request on, and its dashboard "
    "sessions end. It stays listed, with `revoked_at`, for the audit trail.",
    responses=error_responses(404, 422),
)
def revoke_key(
    project_id: OwnProject,
    principal: AdminDep,
    key_id: Annotated[str, Path(min_length=1, max_length=64)],
    session: SessionDep,
) -> KeyOut:
    if not is_id(key_id):
        raise ApiError(404, "not_found", f"no key with id {key_id!r}")
    row = auth.revoke_key(session, key_id, project_id)
    session.commit()
    return KeyOut.of(row, principal.project_name)
