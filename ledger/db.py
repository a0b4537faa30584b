"""Migrations (Alembic) and the scope stamp; everything dialect-specific is in :mod:`ledger.store`.

Alembic is imported only to migrate: opening a ledger reads the database's revision with one
query (:func:`current_revision`) and compares it with the head found in the migration files
(:func:`head_revision`), so a database that is up to date never loads it.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sqlalchemy import (
    Column,
    Connection,
    Engine,
    Executable,
    MetaData,
    String,
    Table,
    bindparam,
    case,
    inspect,
    or_,
    select,
    update,
)
from sqlalchemy.exc import DBAPIError, OperationalError

from ledger.errors import LedgerError
from ledger.models import SCOPES
from ledger.store import Locked, Prepared, Store, param, store_for

if TYPE_CHECKING:
    from alembic.config import Config

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).with_name("migrations")


def make_engine(url: str) -> Engine:
    """An engine for ``url`` with the settings its store relies on (see :mod:`ledger.store`)."""
    from ledger.store import make_engine as _make

    return _make(url)


_T = param("t")
_LATEST = SCOPES.c.latest_at


def _next_latest(clock: Any) -> Any:
    """Past ``clock`` when the clock is ahead of the latest instant, else one microsecond past the latest
    (an explicit instant, ``x = 1``, never moves it backwards)."""
    return case(
        (or_(_LATEST.is_(None), clock > _LATEST), clock),
        (bindparam("x") == 1, _LATEST),
        else_=_LATEST + 1,
    )


def _stamp(store: Store) -> Executable:
    """Create the scope's settings row if missing (PostgreSQL: and lock it) and move its latest instant
    forward, in one statement."""
    new = store.upsert(SCOPES).values(
        scope_key=bindparam("s"), max_records=bindparam("m"), created_at=_T, updated_at=_T, latest_at=_T
    )
    stmt = new.on_conflict_do_update(
        index_elements=[SCOPES.c.scope_key], set_={"latest_at": _next_latest(new.excluded.latest_at)}
    )
    return stmt.returning(_LATEST)  # type: ignore[no-any-return]


# A scope without a settings row keeps none (a refusal's event).
_STAMP_EXISTING = Prepared(
    update(SCOPES).where(SCOPES.c.scope_key == bindparam("s")).values(latest_at=_next_latest(_T)).returning(_LATEST)
)


# The scope's latest instant when the lock has read it already (PostgreSQL).
_SET_LATEST = Prepared(update(SCOPES).where(SCOPES.c.scope_key == bindparam("s")).values(latest_at=_T))


def next_instant(latest_us: int | None, clock_us: int, *, explicit: bool) -> int:
    """The scope's latest instant after a write at ``clock_us``: what :func:`_next_latest` computes in SQL."""
    if latest_us is None or clock_us > latest_us:
        return clock_us
    return latest_us if explicit else latest_us + 1


def stamp(
    conn: Connection,
    scope_key: str,
    *,
    default_max: int,
    clock_us: int,
    explicit: bool,
    create: bool = True,
    locked: Locked | None = None,
) -> int:
    """Lock ``scope_key`` for this transaction and return its instant (docs/ledger.md, "Lock, then instant").

    Without an explicit instant the result is ``clock_us`` or, when the clock is at or before
    the scope's latest instant, that instant + 1 µs: strictly increasing in commit order.
    An explicit instant is returned as given (and recorded when it is the latest).
    ``create=False`` leaves a scope without a settings row without one (a refusal's event).
    ``locked``: the lock already read the scope's latest instant (its row exists and is held), so
    the new one is computed here and the update is sent without waiting for it.
    """
    store = store_for(conn.engine)
    if locked is not None:
        latest = next_instant(locked.latest_us, clock_us, explicit=explicit)
        if latest != locked.latest_us:
            store.send(conn, _SET_LATEST, {"s": scope_key, "t": latest})
        return clock_us if explicit else latest
    params = {"s": scope_key, "m": default_max, "t": clock_us, "x": int(explicit)}
    found = store.rows(conn, store.built(_stamp) if create else _STAMP_EXISTING, params)
    return clock_us if explicit or not found else int(found[0][0])


def alembic_config(url: str | None = None) -> Config:
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(MIGRATIONS_DIR))
    if url is not None:
        cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def upgrade(engine: Engine, revision: str = "head") -> None:
    """Apply Alembic migrations up to ``revision`` on ``engine``'s database.

    Raises:
        LedgerError: the database cannot be reached or opened.
    """
    from alembic import command

    cfg = alembic_config()
    with _reachable(engine), store_for(engine).migrating() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


# Alembic's own table, read without Alembic: one query on open.
_VERSIONS = Table("alembic_version", MetaData(), Column("version_num", String(32), primary_key=True))
_READ_VERSION = select(_VERSIONS.c.version_num)


def current_revision(engine: Engine) -> str | None:
    """The database's Alembic revision (None when never migrated). Raises LedgerError when unreachable."""
    with _reachable(engine), engine.connect() as conn:
        try:
            found = conn.execute(_READ_VERSION).scalars().all()
        except DBAPIError:
            conn.rollback()
            if inspect(conn).has_table(_VERSIONS.name):
                raise
            return None  # never migrated
    if len(found) > 1:
        raise LedgerError(f"the database has more than one schema revision: {sorted(found)}")
    return found[0] if found else None


@contextmanager
def _reachable(engine: Engine) -> Iterator[None]:
    """Translate a failure to connect (server down, unknown database, unwritable file) into a LedgerError."""
    try:
        yield
    except OperationalError as exc:
        first = str(exc.orig).strip().splitlines()[0] if exc.orig is not None else type(exc).__name__
        where = engine.url.render_as_string(hide_password=True)
        raise LedgerError(f"cannot open the ledger database {where!r}: {first}") from exc


_REVISION = re.compile(r"^(down_revision|revision)\b[^=\n]*=\s*(?:[\"']([^\"']+)[\"']|None)", re.MULTILINE)


@cache
def head_revision() -> str:
    """The newest migration's revision, read from the migration files (the one no other revision follows).

    The same answer as Alembic's ``ScriptDirectory.get_current_head()`` without importing Alembic.
    """
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in sorted((MIGRATIONS_DIR / "versions").glob("*.py")):
        for name, value in _REVISION.findall(path.read_text(encoding="utf-8")):
            if value:
                (revisions if name == "revision" else parents).add(value)
    heads = sorted(revisions - parents)
    if len(heads) != 1:
        raise LedgerError(f"the migrations have {len(heads)} heads, not one: {heads}")
    return heads[0]
