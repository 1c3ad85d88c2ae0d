"""A sweep's ``search``: the searchers' specs as one union, told apart by ``method`` (``tpe``
when left out, as before PBT), and pydantic's errors named by the sweep's own fields.

``asha`` proposes nothing: it is the sweep's early stopping (``core.sweeps.asha``) over the grid
and the random draws, spelled as its search; ``tpe`` and ``pbt`` propose configurations as the
sweep runs (``SweepSpec.proposes``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import Discriminator, Tag

from core.sweeps import asha, pbt, tpe
from learners.api import FieldError


def _method(value: Any) -> str:
    """A ``search``'s method; ``tpe`` when left out (as before PBT)."""
    if isinstance(value, Mapping):
        return str(value.get("method", "tpe"))
    return str(getattr(value, "method", "tpe"))


Search = Annotated[
    Annotated[tpe.ModelSearch, Tag("tpe")]
    | Annotated[pbt.PopulationSearch, Tag("pbt")]
    | Annotated[asha.EarlyStopping, Tag("asha")],
    Discriminator(_method),
]


def untagged(error: FieldError) -> FieldError:
    """``search.population``, not pydantic's ``search.pbt.population``: the method's tag is not
    a field of the sweep."""
    if error.field == "search" and "expected tags" in error.reason:
        return FieldError("search.method", "must be tpe, pbt or asha")
    for tag in ("tpe", "pbt", "asha"):
        if error.field.startswith(f"search.{tag}."):
            return FieldError("search." + error.field.removeprefix(f"search.{tag}."), error.reason)
    return error
