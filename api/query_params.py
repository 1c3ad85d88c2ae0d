"""One value per query parameter: a parameter that takes one value, given more than once, is a 422.

Starlette keeps every value of a repeated key (``?names=a&names=b``) and FastAPI hands a scalar
parameter only the last, so without this check the request is answered as if the earlier values
had not been sent. The OpenAPI document declares every such parameter a single value, so a client
repeating one is sending something the API does not define: it is told which parameter, not
silently given a different answer. A parameter declared as a list may repeat.
"""

from __future__ import annotations

import types
from collections import Counter
from typing import Any, Union, get_args, get_origin

from fastapi import Request
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute

from api.errors import ApiError, FieldProblem

_SEQUENCES = (list, tuple, set, frozenset)


def _takes_many(annotation: Any) -> bool:
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        return any(_takes_many(arg) for arg in get_args(annotation))
    return annotation in _SEQUENCES or origin in _SEQUENCES


def _query_params(dependant: Dependant) -> list[Any]:
    params = list(dependant.query_params)
    for sub in dependant.dependencies:
        params.extend(_query_params(sub))
    return params


def _single_valued(route: APIRoute) -> frozenset[str]:
    cached: frozenset[str] | None = getattr(route, "_single_valued_query", None)
    if cached is None:
        params = _query_params(route.dependant)
        cached = frozenset(p.alias for p in params if not _takes_many(p.field_info.annotation))
        route._single_valued_query = cached  # type: ignore[attr-defined]
    return cached


def single_valued_query(request: Request) -> None:
    """Refuse a request that repeats a single-valued query parameter of its route."""
    route = request.scope.get("route")
    if not isinstance(route, APIRoute):
        return
    counts = Counter(key for key, _ in request.query_params.multi_items())
    repeated = sorted(k for k, n in counts.items() if n > 1 and k in _single_valued(route))
    if repeated:
        fields = [
            FieldProblem(field=k, reason=f"given {counts[k]} times; it takes one value")
            for k in repeated
        ]
        message = "; ".join(f"{f.field}: {f.reason}" for f in fields)
        raise ApiError(422, "invalid_request", message, fields)
