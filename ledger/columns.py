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

from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel
from sqlalchemy import BigInteger, Boolean, Float, Integer, Text, false, true
from sqlmodel import Field, SQLModel

if TYPE_CHECKING:
    from sqlmodel._compat import SQLModelConfig

Model = TypeVar("Model", bound=BaseModel)

# The config of a class the API hands out: frozen (a record read is a fact about the past, not a handle).
FROZEN: SQLModelConfig = {"frozen": True}


def text_field(
    *, primary_key: bool = False, unique: bool = False, index: bool = False, default: str | None = None
) -> Any:
    """A ``TEXT`` column (nullable when the field's type admits None); ``default`` is the server's."""
    return Field(sa_type=Text, primary_key=primary_key, unique=unique, index=index, **_server_default(default))


def big_field(*, default: int | None = None) -> Any:
    """A ``BIGINT`` column (instants in microseconds, counts that only grow); ``default`` is the server's."""
    return Field(sa_type=BigInteger, **_server_default(default))


def int_field(*, default: int | None = None) -> Any:
    """An ``INTEGER`` column; ``default`` is the server's."""
    return Field(sa_type=Integer, **_server_default(default))


def float_field(*, default: float | None = None) -> Any:
    """A ``FLOAT`` column; ``default`` is the server's."""
    return Field(sa_type=Float, **_server_default(None if default is None else f"{default:g}"))


def bool_field(*, default: bool | None = None) -> Any:
    """A ``BOOLEAN`` column; ``default`` is the server's (``true``/``false``, as each dialect spells them)."""
    if default is None:
        return Field(sa_type=Boolean)
    return Field(sa_type=Boolean, sa_column_kwargs={"server_default": true() if default else false()})


def serial_field() -> Any:
    """An autoincrementing integer primary key (``seq``): None until the database assigns it."""
    return Field(default=None, primary_key=True, sa_column_kwargs={"autoincrement": True})


def _server_default(value: int | str | None) -> dict[str, Any]:
    # The server's default, as text: the DDL the tables were first created with (DEFAULT '0').
    return {} if value is None else {"sa_column_kwargs": {"server_default": str(value)}}


def instant_field(*, default: int | None = None) -> Any:
    """An instant: a ``datetime`` to the API, a ``BIGINT`` of microseconds since the epoch in the table."""
    return big_field(default=default)


def json_field() -> Any:
    """A list or mapping: itself to the API, its JSON (``TEXT``) in the table."""
    return Field(sa_type=Text)


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


def field_names(model: type[SQLModel]) -> tuple[str, ...]:
    """The fields ``model`` states or inherits, in order."""
    return tuple(model.model_fields)
