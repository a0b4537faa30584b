"""PostgreSQL: READ COMMITTED writers serialized per scope by its ``scope_settings`` row lock,
REPEATABLE READ reads, ``tsvector`` search over a GIN index, SQLSTATE-based retry."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar

from sqlalchemy import Connection, Engine, RowMapping, Table, create_engine, select, text
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.exc import DBAPIError

from ledger.models import SCOPES
from ledger.store.base import Store, prefixed_columns
from ledger.store.prepared import Prepared, param

log = logging.getLogger(__name__)
MAX_TERMS = 32
_WORD = re.compile(r"\w+", re.UNICODE)
# serialization failure, deadlock, lock not available
_RETRY_SQLSTATES = ("40001", "40P01", "55P03")


_LOCK = Prepared(select(SCOPES.c.scope_key).where(SCOPES.c.scope_key == param("s")).with_for_update())


# pg_advisory_xact_lock's key for migrations: any constant no other user of the database takes.
MIGRATION_LOCK_KEY = 0x6D656D6C  # "meml"


class PostgresStore(Store):
    dialect: ClassVar[str] = "postgresql"
    migrate_on_open: ClassVar[bool] = False

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        vector = "to_tsvector('english', coalesce(m.body, ''))"
        self._search_sql = (
            f"SELECT {prefixed_columns('m')} FROM memory_records m WHERE m.scope_key = :s AND m.status = 'active' "
            f"AND (m.expires_at IS NULL OR m.expires_at > :n) AND {vector} @@ websearch_to_tsquery('english', :q) "
            f"ORDER BY ts_rank({vector}, websearch_to_tsquery('english', :q)) DESC, m.seq LIMIT :lim"
        )

    @classmethod
    def create_engine(cls, url: str) -> Engine:
        return create_engine(url, pool_pre_ping=True, pool_size=10, max_overflow=20)

    @contextmanager
    def _begin_write(self) -> Iterator[Connection]:
        # The scope's lock is the row lock the stamp statement takes (INSERT .. ON CONFLICT DO UPDATE).
        with self.engine.connect() as conn, conn.begin():
            yield conn

    @contextmanager
    def migrating(self) -> Iterator[Connection]:
        # A transaction-scoped advisory lock: concurrent `memledger db upgrade`s run one after another.
        with self.engine.begin() as conn:
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": MIGRATION_LOCK_KEY})
            yield conn

    @contextmanager
    def _begin_read(self) -> Iterator[Connection]:
        with self.engine.connect() as conn:
            conn = conn.execution_options(isolation_level="REPEATABLE READ")
            with conn.begin():
                yield conn

    def upsert(self, table: Table) -> Any:
        return postgresql_insert(table)

    def lock_scope(self, conn: Connection, scope_key: str) -> None:
        """The scope's ``scope_settings`` row lock, taken before the clock is read.

        Otherwise a writer whose clock was read while it waited for the lock could take an instant
        before that of a transaction that committed meanwhile without stamping (the sweep of every
        scope, which expires records at their expiry): it would then act, at an earlier instant, on
        what that transaction changed. A scope without a settings row has no records to race for;
        its row is created, and locked, by the stamp.
        """
        self.rows(conn, _LOCK, {"s": scope_key})

    def search(self, conn: Connection, scope: str, query: str, *, limit: int, now_us: int) -> list[RowMapping]:
        words = _WORD.findall(query)[:MAX_TERMS]
        if not words:
            return []
        params = {"q": " or ".join(words), "s": scope, "n": now_us, "lim": limit}
        return list(conn.execute(text(self._search_sql), params).mappings())

    def compact(self, tables: Sequence[str]) -> tuple[bool, list[str]]:
        quote = self.engine.dialect.identifier_preparer.quote
        with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            for table in tables:
                log.info("VACUUM FULL %s", table)
                conn.exec_driver_sql(f"VACUUM FULL {quote(table)}")
            try:
                conn.exec_driver_sql("CHECKPOINT")
            except DBAPIError:
                note = (
                    "CHECKPOINT needs a superuser or the pg_checkpoint role; the next scheduled checkpoint "
                    "(checkpoint_timeout) does the same"
                )
                return False, [note]
        return True, []

    def size_bytes(self, tables: Sequence[str]) -> int:
        size = text("SELECT pg_total_relation_size(:t)")
        with self.engine.connect() as conn:
            return sum(int(conn.execute(size, {"t": t}).scalar_one()) for t in tables)

    def is_busy(self, exc: BaseException) -> bool:
        return getattr(getattr(exc, "orig", None), "sqlstate", None) in _RETRY_SQLSTATES
