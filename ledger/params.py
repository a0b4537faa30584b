"""The params of the record protocol's methods (:mod:`ledger.protocol`): strict pydantic models, camelCase."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, ClassVar

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, PlainValidator, StrictBool, StrictInt
from pydantic.alias_generators import to_camel

from ledger.models import Kind, Provenance
from ledger.paging import MAX_LIMIT
from ledger.wire import body_text, line_text, parse_wire_instant, request_id_text

Instant = Annotated[datetime, PlainValidator(parse_wire_instant)]
Line = Annotated[str, PlainValidator(line_text)]
Text = Annotated[str, PlainValidator(body_text)]
RecordId = Annotated[Line, Field(validation_alias=AliasChoices("id", "recordId"))]
RequestId = Annotated[str, PlainValidator(request_id_text)]


class Params(BaseModel):
    """Base of every method's params: camelCase names, unknown names refused, strict types.

    Extra methods validate their own params with a subclass (``NoParams.model_validate(params)``);
    a :class:`pydantic.ValidationError` becomes an ``invalid_params`` error that names each wire
    field and, for an unknown one, lists the params the method takes. ``Line``, ``Text`` and
    ``Instant`` are the strict field types to use.
    """

    model_config = ConfigDict(extra="forbid", alias_generator=to_camel, populate_by_name=False, frozen=True)
    registry: ClassVar[dict[str, type[Params]]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        Params.registry[cls.__name__] = cls

    @classmethod
    def wire_names(cls) -> list[str]:
        """The params this model takes, as the wire spells them."""
        names = []
        for name, info in cls.model_fields.items():
            alias = info.validation_alias
            names.append(alias.choices[0] if isinstance(alias, AliasChoices) else info.alias or name)
        return [str(n) for n in names]


class NoParams(Params):
    """A method that takes no params."""


class SaveParams(Params):
    body: Text
    kind: Kind | None = None
    supersedes: Line | None = None
    expires_at: Instant | None = None
    conflict_group: Line | None = None
    source_session_id: Line | None = None
    request_id: RequestId | None = None


class ScopeParams(Params):
    scope_key: Line | None = None


class PageParams(ScopeParams):
    limit: Annotated[StrictInt, Field(ge=1, le=MAX_LIMIT)] | None = None
    cursor: Line | None = None
    kind: Kind | None = None
    provenance: Provenance | None = None
    conflict_group: Line | None = None


class AsOfParams(ScopeParams):
    as_of: Instant


class IdParams(Params):
    id: RecordId


class SearchParams(ScopeParams):
    query: Line
    limit: StrictInt = 20


class SlashParams(Params):
    text: Text


class PacketParams(ScopeParams):
    max_chars: Annotated[StrictInt, Field(ge=1, le=1_000_000)] | None = None
    session_id: Line | None = None


class AuditParams(Params):
    session_id: Line


class InjectionParams(Params):
    enabled: StrictBool
