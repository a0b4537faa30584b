"""Migrations (Alembic) and the scope stamp; everything dialect-specific is in :mod:`ledger.store`."""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from alembic import command
from alembic.config import Config
from sqlalchemy import Connection, Engine
from sqlalchemy.exc import OperationalError

from ledger.errors import LedgerError
from ledger.store import execute as _store_execute
from ledger.store import query as _store_query

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).with_name("migrations")


def make_engine(url: str) -> Engine:
    """An engine for ``url`` with the settings its store relies on (see :mod:`ledger.store`)."""
    from ledger.store import make_engine as _make

    return _make(url)


# Create the scope's settings row if missing (PostgreSQL: and lock it) and move its latest
# instant forward in the same statement: past ``:t`` when the clock is ahead of it, else one
# microsecond past the previous latest (an explicit instant never moves it backwards).
_STAMP = (
    "INSERT INTO scope_settings (scope_key, max_records, created_at, updated_at, latest_at) "
    "VALUES (:s, :m, :t, :t, :t) ON CONFLICT (scope_key) DO UPDATE SET latest_at = CASE "
    "WHEN scope_settings.latest_at IS NULL OR scope_settings.latest_at < excluded.latest_at "
    "THEN excluded.latest_at WHEN :x = 1 THEN scope_settings.latest_at ELSE scope_settings.latest_at + 1 END "
    "RETURNING latest_at"
)


_STAMP_EXISTING = (
    "UPDATE scope_settings SET latest_at = CASE WHEN latest_at IS NULL OR latest_at < :t THEN :t "
    "WHEN :x = 1 THEN latest_at ELSE latest_at + 1 END WHERE scope_key = :s RETURNING latest_at"
)


def stamp(
    conn: Connection, scope_key: str, *, default_max: int, clock_us: int, explicit: bool, create: bool = True
) -> int:
    """Lock ``scope_key`` for this transaction and return its instant (SPEC 3.1).

    Without an explicit instant the result is ``clock_us`` or, when the clock is at or before
    the scope's latest instant, that instant + 1 µs: strictly increasing in commit order.
    An explicit instant is returned as given (and recorded when it is the latest).
    ``create=False`` leaves a scope without a settings row without one (a refusal's event).
    """
    params = {"s": scope_key, "m": default_max, "t": clock_us, "x": int(explicit)}
    found = _store_query(conn, _STAMP if create else _STAMP_EXISTING, params)
    return clock_us if explicit or not found else int(found[0][0])


def alembic_config(url: str | None = None) -> Config:
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
    cfg = alembic_config()
    with _reachable(engine), engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, revision)


def current_revision(engine: Engine) -> str | None:
    """The database's Alembic revision (None when never migrated). Raises LedgerError when unreachable."""
    from alembic.runtime.migration import MigrationContext

    with _reachable(engine), engine.connect() as conn:
        return MigrationContext.configure(conn).get_current_revision()


@contextmanager
def _reachable(engine: Engine) -> Iterator[None]:
    """Translate a failure to connect (server down, unknown database, unwritable file) into a LedgerError."""
    try:
        yield
    except OperationalError as exc:
        first = str(exc.orig).strip().splitlines()[0] if exc.orig is not None else type(exc).__name__
        where = engine.url.render_as_string(hide_password=True)
        raise LedgerError(f"cannot open the ledger database {where!r}: {first}") from exc


def head_revision() -> str:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    assert head is not None
    return head


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def is_sqlite(engine: Engine) -> bool:
    """Whether ``engine`` is SQLite (kept for callers outside the store; dialect code belongs in ledger.store)."""
    return engine.dialect.name == "sqlite"


# Kept for callers written against the old module (ledger.store is where these live now).
execute = _store_execute
query = _store_query
