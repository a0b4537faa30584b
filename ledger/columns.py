"""How a table's fields are stated: one helper per column type, and :func:`construct` for the read path.

A field is stated once, as an annotated attribute of a SQLModel class. The class the API hands out and
the table class both inherit it (``MemoryRecord`` and ``MemoryRecordRow`` from ``MemoryRecordFields``):
the annotation is the type the API hands out, the helper the column's type. Two kinds of field are
stored as something else, and the statements convert them (the ORM is never used, so a table class is
never instantiated):

* an instant (``datetime``, :func:`instant_field`) is a ``BIGINT`` of microseconds since the epoch;
* a list or mapping (:func:`json_field`) is ``TEXT`` holding its JSON.

An enum field is ``TEXT`` holding the value (:func:`text_field`), kept to its values by a CHECK.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar, Unpack

from pydantic import BaseModel
from pydantic_core import PydanticUndefined
from sqlalchemy import BigInteger, Boolean, Float, Integer, Text, false, true
from sqlmodel import Field

if TYPE_CHECKING:
    from sqlmodel._compat import SQLModelConfig

Model = TypeVar("Model", bound=BaseModel)

# The config of a class the API hands out: frozen (a record read is a fact about the past, not a handle).
FROZEN: SQLModelConfig = {"frozen": True}


class ApiSide(TypedDict, total=False):
    """The API type's side of a field, which the table does not have: the default a field left out
    takes (``value``, or ``factory`` for a list or mapping) and ``hidden``, for a field its repr leaves
    out (one holding bodies). The table's own default is the server's (each helper's ``default``)."""

    value: Any
    factory: Callable[[], Any]
    hidden: bool


def text_field(
    *,
    primary_key: bool = False,
    unique: bool = False,
    index: bool = False,
    default: str | None = None,
    **api: Unpack[ApiSide],
) -> Any:
    """A ``TEXT`` column (nullable when the field's type admits None); ``default`` is the server's."""
    return _field(Text, default, api, primary_key=primary_key, unique=unique, index=index)


def big_field(*, default: int | None = None, **api: Unpack[ApiSide]) -> Any:
    """A ``BIGINT`` column (instants in microseconds, counts that only grow); ``default`` is the server's."""
    return _field(BigInteger, None if default is None else str(default), api)


def int_field(*, default: int | None = None, **api: Unpack[ApiSide]) -> Any:
    """An ``INTEGER`` column; ``default`` is the server's."""
    return _field(Integer, None if default is None else str(default), api)


def float_field(*, default: float | None = None, **api: Unpack[ApiSide]) -> Any:
    """A ``FLOAT`` column; ``default`` is the server's."""
    return _field(Float, None if default is None else f"{default:g}", api)


def bool_field(*, default: bool | None = None, **api: Unpack[ApiSide]) -> Any:
    """A ``BOOLEAN`` column; ``default`` is the server's (``true``/``false``, as each dialect spells them)."""
    return _field(Boolean, None if default is None else true() if default else false(), api)


def serial_field() -> Any:
    """An autoincrementing integer primary key (``seq``): None until the database assigns it."""
    return Field(default=None, primary_key=True, sa_column_kwargs={"autoincrement": True})


def _field(sa_type: Any, server_default: Any, api: ApiSide, **column: Any) -> Any:
    # The server's default is the DDL the tables were first created with (DEFAULT '0'). The API type's
    # default is not the table's: an INSERT names its values or takes the server's default.
    column_kwargs: dict[str, Any] = {} if server_default is None else {"server_default": server_default}
    if "value" in api or "factory" in api:
        column_kwargs["default"] = None
    return Field(
        api.get("value", PydanticUndefined),
        default_factory=api.get("factory"),
        repr=not api.get("hidden", False),
        sa_type=sa_type,
        sa_column_kwargs=column_kwargs,
        **column,
    )


def instant_field(*, default: int | None = None, **api: Unpack[ApiSide]) -> Any:
    """An instant: a ``datetime`` to the API, a ``BIGINT`` of microseconds since the epoch in the table."""
    return big_field(default=default, **api)


def json_field(*, default: str | None = None, **api: Unpack[ApiSide]) -> Any:
    """A list or mapping: itself to the API, its JSON (``TEXT``) in the table; ``default`` is the server's JSON."""
    return _field(Text, default, api)


_NEW = object.__new__
# The slots every pydantic model has, set through their descriptors: a third faster than object.__setattr__.
_SET_DICT = BaseModel.__dict__["__dict__"].__set__
_SET_FIELDS_SET = BaseModel.__dict__["__pydantic_fields_set__"].__set__
_SET_EXTRA = BaseModel.__dict__["__pydantic_extra__"].__set__
_SET_PRIVATE = BaseModel.__dict__["__pydantic_private__"].__set__


def construct(model: type[Model], values: dict[str, Any], fields_set: set[str]) -> Model:
    """An instance of ``model`` holding ``values``, unchecked: for values read back from the database,
    which the table's types and CHECKs already hold to the fields (validating them again would cost more
    than reading them). ``values`` names every field, in order; ``fields_set`` is ``set(model.model_fields)``,
    computed once by the caller (the instance keeps it, as pydantic's ``model_construct`` would).

    ``tests/ledger/test_columns.py`` holds it equal to validating the same values.
    """
    built: Model = _NEW(model)
    _SET_DICT(built, values)
    _SET_FIELDS_SET(built, fields_set)
    _SET_EXTRA(built, None)
    _SET_PRIVATE(built, None)
    return built
