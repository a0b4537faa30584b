"""The check that a typed record's fields are stated once: in the class its table and its API type inherit."""

from __future__ import annotations

from sqlmodel import SQLModel

from ledger.schema import table


def assert_stated_once(
    fields: type[SQLModel], row: type[SQLModel], api: type[SQLModel], *, row_only: set[str], api_only: set[str]
) -> None:
    """Every field of ``fields`` is a column of ``row``'s table and a field of ``api``, inherited by both (neither
    states it again); the table's other columns are ``row_only`` and the API type's other fields ``api_only``."""
    stated = set(fields.model_fields)
    assert issubclass(row, fields) and issubclass(api, fields)
    assert set(table(row).c.keys()) == stated | row_only
    assert set(api.model_fields) == stated | api_only
    assert not stated & (set(vars(row).get("__annotations__", {})) | set(vars(api).get("__annotations__", {})))
    for name in stated:
        assert api.model_fields[name].annotation == fields.model_fields[name].annotation, name
