"""Migrations (Alembic); everything dialect-specific, the scope's lock and instant too, is in :mod:`ledger.store`.

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
from typing import TYPE_CHECKING

from sqlalchemy import (
    Column,
    Engine,
    MetaData,
    String,
    Table,
    inspect,
    select,
)
from sqlalchemy.exc import DBAPIError, OperationalError

from ledger.errors import LedgerError
from ledger.store import store_for

if TYPE_CHECKING:
    from alembic.config import Config

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).with_name("migrations")


def make_engine(url: str, *, sqlite_synchronous: str = "normal") -> Engine:
    """An engine for ``url`` with the settings its store relies on (see :mod:`ledger.store`); on SQLite
    ``PRAGMA synchronous`` is ``sqlite_synchronous`` (``normal`` or ``full``, docs/operations.md)."""
    from ledger.store import make_engine as _make

    return _make(url, sqlite_synchronous=sqlite_synchronous)


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
