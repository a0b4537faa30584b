"""PostgreSQL: READ COMMITTED writers serialized per scope by its ``scope_settings`` row lock,
REPEATABLE READ reads, ``tsvector`` search over a GIN index, SQLSTATE-based retry.

Round trips. Each statement run through SQLAlchemy waits for its answer, and a save runs six:
over a network, or on a busy machine where every wait is a chance to be descheduled, the
waits cost more than the statements. So the prepared statements go straight to psycopg's
cursor (compiled once, like SQLite's direct path), and a write transaction runs in psycopg's
pipeline mode: a statement whose answer is not needed yet (:meth:`PostgresStore.send`, or
one read later through :meth:`PostgresStore.query`) travels with the next one that is waited
for, and ``COMMIT`` travels with what is still queued. A plain save waits three times: the
scope's lock, the budget check, the commit. A statement run through SQLAlchemy (one built
per call) first takes the connection out of pipeline mode, since SQLAlchemy reads its results
at once; the statements queued before it are waited for then.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, ClassVar

from sqlalchemy import Connection, Dialect, Engine, Float, RowMapping, Table, create_engine, event, select, text
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.exc import DBAPIError, DisconnectionError
from sqlalchemy.sql.compiler import SQLCompiler

from ledger.errors import LedgerBusy, LedgerError, OutcomeUnknown
from ledger.schema import RECORDS, SCOPES
from ledger.store import postgres_ddl, postgres_save
from ledger.store.base import REBUILD_INDEX_HINT, Locked, Params, Pending, Rows, Statement, Store, prefixed_columns
from ledger.store.driver import psycopg
from ledger.store.prepared import Prepared, param

log = logging.getLogger(__name__)
MAX_TERMS = 32
_WORD = re.compile(r"\w+", re.UNICODE)
# serialization failure, deadlock, lock not available
_RETRY_SQLSTATES = ("40001", "40P01", "55P03")
# The server ended the session (admin_shutdown, crash_shutdown, cannot_connect_now), or class 08: the connection.
_GONE_SQLSTATES = ("57P01", "57P02", "57P03")
# How long a plain save whose connection was lost keeps trying to read whether it was written.
CHECK_AFTER_LOSS_S = 5.0


_WRITTEN = Prepared(
    select(RECORDS.c.valid_from, RECORDS.c.kind, RECORDS.c.conflict_group).where(RECORDS.c.id == param("rid"))
)
_LOCK = Prepared(select(SCOPES.c.latest_at).where(SCOPES.c.scope_key == param("s")).with_for_update())
# Where a write transaction keeps its pipeline: the DB-API connection's info (see _Pipe).
_PIPE = "memledger_pipe"


(_SEARCH_INDEX,) = postgres_ddl.SEARCH
_SEARCH_INDEX_VALID = text("SELECT indisvalid AND indisready FROM pg_index WHERE indexrelid = to_regclass(:n)")

# pg_advisory_xact_lock's key for migrations: any constant no other user of the database takes.
MIGRATION_LOCK_KEY = 0x6D656D6C  # "meml"


class PostgresStore(Store):
    dialect: ClassVar[str] = "postgresql"
    ddl = postgres_ddl.OBJECTS
    migrate_on_open: ClassVar[bool] = False
    saves_plain: ClassVar[bool] = True

    def __init__(self, engine: Engine) -> None:
        super().__init__(engine)
        vector = "to_tsvector('english', coalesce(m.body, ''))"
        self._search_sql = (
            f"SELECT {prefixed_columns('m')} FROM memory_records m WHERE m.scope_key = :s AND m.status = 'active' "
            f"AND (m.expires_at IS NULL OR m.expires_at > :n) AND {vector} @@ websearch_to_tsquery('english', :q) "
            f"ORDER BY ts_rank({vector}, websearch_to_tsquery('english', :q)) DESC, m.seq LIMIT :lim"
        )

    # A pooled connection idle longer than this is checked (one round trip) before it is used.
    ping_after_idle_s: ClassVar[float] = 1.0

    @classmethod
    def create_engine(cls, url: str) -> Engine:
        """The engine; its pool checks a connection before use only when it sat idle.

        SQLAlchemy's ``pool_pre_ping`` checks every checkout: a round trip on every write, a
        quarter of a save's. A connection returned less than :attr:`ping_after_idle_s` ago was
        answering then; one that broke since (the server restarted in that second) fails its
        statement with a clear error once, and the pool drops it.
        """
        # hide_parameters: a statement's values (a body) never enter an error's text, so no traceback logs one.
        engine = create_engine(url, pool_size=10, max_overflow=20, hide_parameters=True)
        event.listen(engine, "before_cursor_execute", _leave_pipeline)
        event.listen(engine, "checkin", _note_idle)
        event.listen(engine, "checkout", _ping_if_idle(cls, engine))
        return engine

    @contextmanager
    def _begin_write(self) -> Iterator[Connection]:
        """A write transaction in pipeline mode; ``COMMIT`` goes with the statements still queued."""
        with self.engine.connect() as conn:
            info = conn.connection.info
            pipe = info[_PIPE] = _Pipe(conn.connection.driver_connection)
            try:
                with conn.begin():
                    yield conn
                    pipe.commit()
            except DBAPIError as exc:
                # After COMMIT was sent, an error the server did not answer (no SQLSTATE) leaves the outcome open too.
                if not (_lost(exc, pipe.raw) or (pipe.commit_sent and not _answered(exc))):
                    raise  # the server answered: the transaction was rolled back
                conn.invalidate()
                if not pipe.commit_sent:
                    # The server never saw a COMMIT: nothing of this write happened, so it is safe to run
                    # again on another connection (Ledger.run retries LedgerBusy).
                    raise LedgerBusy("the connection to the ledger database was lost; try again") from exc
                # It may have committed before the connection went: only a read can tell, never a retry.
                raise OutcomeUnknown.lost() from exc
            finally:
                del info[_PIPE]
                pipe.leave(quiet=True)
                if not pipe.restore():
                    conn.invalidate()

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

    def lock_scope(self, conn: Connection, scope_key: str) -> Locked | None:
        """The scope's ``scope_settings`` row lock, taken before the clock is read; the scope's latest instant.

        Otherwise a writer whose clock was read while it waited for the lock could take an instant
        before that of a transaction that committed meanwhile without stamping (the sweep of every
        scope, which expires records at their expiry): it would then act, at an earlier instant, on
        what that transaction changed. A scope without a settings row has no records to race for;
        its row is created, and locked, by the stamp (None here).
        """
        found = self.rows(conn, _LOCK, {"s": scope_key})
        return Locked(found[0][0]) if found else None

    # ------------------------------------------------------------------ the direct path
    def run(self, conn: Connection, stmt: Statement, params: Params | None = None) -> int:
        plan = _plan(stmt, self.engine.dialect)
        if plan is None or isinstance(params, Sequence):
            return super().run(conn, stmt, params)
        cur = self._execute(conn, plan, params)
        pipe = conn.connection.info.get(_PIPE)
        if pipe is not None and pipe.active:
            _call(pipe.sync)  # the row count is known once the answer is in
        return int(cur.rowcount)

    def rows(self, conn: Connection, stmt: Statement, params: Mapping[str, Any] | None = None) -> list[tuple[Any, ...]]:
        plan = _plan(stmt, self.engine.dialect)
        if plan is None:
            return super().rows(conn, stmt, params)
        cur = self._execute(conn, plan, params)
        found: list[tuple[Any, ...]] = _call(cur.fetchall)
        return found

    def send(self, conn: Connection, stmt: Statement, params: Mapping[str, Any] | None = None) -> None:
        plan = _plan(stmt, self.engine.dialect)
        if plan is None:
            super().send(conn, stmt, params)
            return
        self._execute(conn, plan, params)

    def flush(self, conn: Connection) -> None:
        pipe = conn.connection.info.get(_PIPE)
        if pipe is not None and pipe.active:
            _call(pipe.sync)

    def query(self, conn: Connection, stmt: Statement, params: Mapping[str, Any] | None = None) -> Pending[Rows]:
        plan = _plan(stmt, self.engine.dialect)
        if plan is None:
            return super().query(conn, stmt, params)
        cur = self._execute(conn, plan, params)
        return Pending(lambda: _call(cur.fetchall))

    def _execute(self, conn: Connection, plan: _Plan, params: Mapping[str, Any] | None) -> psycopg.Cursor[Any]:
        """Send ``plan`` on the DB-API connection: in pipeline mode inside a write transaction."""
        record = conn.connection
        pipe = record.info.get(_PIPE)
        if pipe is not None:
            _call(pipe.enter)
        raw: psycopg.Connection[Any] = record.driver_connection  # type: ignore[assignment]
        cur = raw.cursor()
        values = plan.bind(params or {})
        try:
            cur.execute(plan.sql, values)
        except psycopg.Error as exc:
            raise DBAPIError.instance(plan.sql, values, exc, psycopg.Error, hide_parameters=True) from exc
        return cur

    def save_plain(self, params: Mapping[str, Any]) -> int | None:
        """``memledger_save`` in a transaction of its own: one statement, one round trip (see
        :mod:`ledger.store.postgres_save`)."""
        found = self._one_statement(postgres_save.CALL, params)
        return None if found is None else int(found[0])

    def edit_plain(self, params: Mapping[str, Any]) -> tuple[int, str, str | None] | None:
        """``memledger_edit`` in a transaction of its own, as :meth:`save_plain`."""
        found = self._one_statement(postgres_save.EDIT_CALL, params)
        return None if found is None else (int(found[0]), str(found[1]), found[2])

    def _one_statement(self, sql: str, params: Mapping[str, Any]) -> tuple[Any, ...] | None:
        """Call a write function on a connection of its own: the row it answered, None when it declined.

        The call is its own commit, so a connection that breaks during it leaves unknown whether
        the record was written. The scope's lock, taken on another connection, waits for a call the
        server is still running; then the record's id says: its row when it was written, None
        (write it again) when it was not.
        """
        with self.boundary, self._lock:
            proxy = self.engine.raw_connection()
            raw: psycopg.Connection[Any] = proxy.driver_connection  # type: ignore[assignment]
            try:
                answered: tuple[Any, ...] | None = _call(lambda: postgres_save.call(raw, sql, params))
                return answered
            except DBAPIError as exc:
                if not _lost(exc, raw):
                    raise
                proxy.invalidate()
            finally:
                proxy.close()
            return self._written(params["s"], params["id"])

    def _written(self, scope: str, record_id: str) -> tuple[Any, ...] | None:
        """After a one-statement write's connection was lost: the instant ``record_id`` was written at, its kind
        and conflict group, None when it was not written.

        Read after the scope's lock (which waits for a call the server is still running), on another
        connection, a few times while the database cannot be reached.

        Raises:
            OutcomeUnknown: the database could not be asked within :data:`CHECK_AFTER_LOSS_S`.
        """
        deadline = time.monotonic() + CHECK_AFTER_LOSS_S
        pause_s = 0.05
        while True:
            try:
                with self._begin_write() as conn:
                    self.lock_scope(conn, scope)
                    found = self.rows(conn, _WRITTEN, {"rid": record_id})
                return tuple(found[0]) if found else None
            except (DBAPIError, LedgerError) as exc:
                if time.monotonic() + pause_s > deadline:
                    raise OutcomeUnknown.lost(record_id) from exc
                log.info("checking whether save %s was written: %s; again in %.2f s", record_id, exc, pause_s)
                time.sleep(pause_s)
                pause_s = min(pause_s * 2, 1.0)

    def search(self, conn: Connection, scope: str, query: str, *, limit: int, now_us: int) -> list[RowMapping]:
        words = _WORD.findall(query)[:MAX_TERMS]
        if not words:
            return []
        params = {"q": " or ".join(words), "s": scope, "n": now_us, "lim": limit}
        return list(conn.execute(text(self._search_sql), params).mappings())

    def search_index_problem(self, *, thorough: bool) -> str | None:
        # A GIN index PostgreSQL maintains itself: what can go wrong is a build that failed half-way (an
        # invalid index, which no query uses: searches read every active row) or a dropped one. PostgreSQL
        # 15 has no checker for the entries of a GIN index (amcheck's gin_index_check came with 18).
        with self.read() as conn:
            valid = conn.execute(_SEARCH_INDEX_VALID, {"n": _SEARCH_INDEX.name}).scalar_one_or_none()
        if valid is None:
            return f"the full-text index {_SEARCH_INDEX.name} is missing; {REBUILD_INDEX_HINT}"
        if not valid:
            return f"the full-text index {_SEARCH_INDEX.name} is invalid (a build did not finish); {REBUILD_INDEX_HINT}"
        return None

    def rebuild_search_index(self) -> None:
        # CONCURRENTLY: writes go on while it builds (it cannot run inside a transaction block).
        with self.boundary, self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            if conn.execute(_SEARCH_INDEX_VALID, {"n": _SEARCH_INDEX.name}).scalar_one_or_none() is None:
                conn.exec_driver_sql(_SEARCH_INDEX.sql.replace("CREATE INDEX", "CREATE INDEX CONCURRENTLY", 1))
            else:
                conn.exec_driver_sql(f"REINDEX INDEX CONCURRENTLY {_SEARCH_INDEX.name}")
        left = self.search_index_problem(thorough=True)
        if left is not None:
            raise LedgerError(f"the full-text index is still damaged after a rebuild: {left}")

    def compact(self, tables: Sequence[str]) -> tuple[bool, list[str]]:
        quote = self.engine.dialect.identifier_preparer.quote
        with self.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
            notes = _holding_old_rows(conn)
            for table in tables:
                log.info("VACUUM FULL %s", table)
                conn.exec_driver_sql(f"VACUUM FULL {quote(table)}")
            try:
                conn.exec_driver_sql("CHECKPOINT")
            except DBAPIError:
                notes.append(
                    "CHECKPOINT needs a superuser or the pg_checkpoint role; the next scheduled checkpoint "
                    "(checkpoint_timeout) does the same"
                )
                return False, notes
        return True, notes

    def size_bytes(self, tables: Sequence[str]) -> int:
        size = text("SELECT pg_total_relation_size(:t)")
        with self.engine.connect() as conn:
            return sum(int(conn.execute(size, {"t": t}).scalar_one()) for t in tables)

    def is_busy(self, exc: BaseException) -> bool:
        return getattr(getattr(exc, "orig", None), "sqlstate", None) in _RETRY_SQLSTATES


# What keeps a dead row version through VACUUM FULL: another session of this database with a snapshot or a
# transaction open (it may still see the version), a prepared transaction, a replication slot's horizon.
_HOLDERS = text(
    "SELECT (SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
    "AND pid <> pg_backend_pid() AND coalesce(backend_xmin, backend_xid) IS NOT NULL), "
    "(SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database()), "
    "(SELECT count(*) FROM pg_replication_slots WHERE xmin IS NOT NULL "
    "AND (database IS NULL OR database = current_database()))"
)


def _holding_old_rows(conn: Connection) -> list[str]:
    """A note when something may keep erased row versions through the rewrite (empty when nothing does)."""
    sessions, prepared, slots = conn.execute(_HOLDERS).one()
    held = [
        f"{n} {what}"
        for n, what in (
            (sessions, "other session(s) with a transaction open"),
            (prepared, "prepared transaction(s)"),
            (slots, "replication slot(s) holding back vacuum"),
        )
        if n
    ]
    if not held:
        return []
    return [
        f"{', '.join(held)} when compaction began: the row versions they can still see (a body forgotten "
        "before they began) were kept; run `memledger db compact` again once they have ended"
    ]


def _errors(exc: BaseException) -> list[BaseException]:
    """``exc`` and the errors it was raised from or while handling (a failed rollback hides the failed COMMIT)."""
    found: list[BaseException] = []
    seen: BaseException | None = exc
    while seen is not None and len(found) < 16:
        found.append(seen)
        seen = seen.__cause__ or seen.__context__
    return found


def _sqlstates(exc: BaseException) -> list[str]:
    states = (getattr(getattr(e, "orig", e), "sqlstate", None) for e in _errors(exc))
    return [state for state in states if state]


def _lost(exc: DBAPIError, raw: psycopg.Connection[Any]) -> bool:
    """Whether ``exc`` means the connection is gone (no answer can come on it), not a refusal by the server."""
    invalidated = any(getattr(e, "connection_invalidated", False) for e in _errors(exc))
    gone = any(state in _GONE_SQLSTATES or state.startswith("08") for state in _sqlstates(exc))
    return bool(raw.broken or invalidated or gone)


def _answered(exc: DBAPIError) -> bool:
    """Whether the server answered with an error (an SQLSTATE): else the client failed (e.g. psycopg's pipeline
    left busy by a read that never came back), and after ``COMMIT`` was sent nothing says whether it committed."""
    return bool(_sqlstates(exc))


def _call(fn: Any) -> Any:
    """``fn()``, a psycopg error raised as SQLAlchemy raises it (so the store's boundary translates it)."""
    try:
        return fn()
    except psycopg.Error as exc:
        raise DBAPIError.instance(None, None, exc, psycopg.Error) from exc


class _Pipe:
    """A write transaction's pipeline: entered by the first direct statement, left before a
    statement run through SQLAlchemy (which reads its answer at once) and at the commit.

    When it opens the transaction, the ``BEGIN`` is the pipeline's own first statement: psycopg's
    automatic one would wait for its answer before anything else is sent. The connection is in
    autocommit mode meanwhile (so psycopg sends no ``BEGIN`` of its own), which
    :meth:`restore` undoes once the transaction has ended.
    """

    __slots__ = ("_autocommit", "_ctx", "_pipeline", "commit_sent", "raw")

    def __init__(self, raw: Any) -> None:
        self.raw: psycopg.Connection[Any] = raw
        self._ctx: AbstractContextManager[psycopg.Pipeline] | None = None
        self._pipeline: psycopg.Pipeline | None = None
        self._autocommit: bool | None = None
        self.commit_sent = False

    @property
    def active(self) -> bool:
        return self._ctx is not None

    def enter(self) -> None:
        if self._ctx is not None:
            return
        begin = self.raw.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        if begin and self._autocommit is None:
            self._autocommit, self.raw.autocommit = self.raw.autocommit, True
        ctx = self.raw.pipeline()
        self._pipeline = ctx.__enter__()
        self._ctx = ctx
        if begin:
            self.raw.cursor().execute("BEGIN")

    def restore(self) -> bool:
        """The connection's own transaction handling back, once the transaction has ended; False when it
        cannot be (a broken connection, a failed rollback): the connection must then be discarded."""
        autocommit, self._autocommit = self._autocommit, None
        if autocommit is None:
            return True
        try:
            self.raw.autocommit = autocommit
        except psycopg.Error:
            log.debug("could not restore autocommit on a write connection", exc_info=True)
            return False
        return True

    def sync(self) -> None:
        if self._pipeline is not None:
            self._pipeline.sync()

    def leave(self, *, quiet: bool = False) -> None:
        """Out of pipeline mode, every queued statement answered (its error raised, unless ``quiet``)."""
        ctx, self._ctx, self._pipeline = self._ctx, None, None
        if ctx is None:
            return
        try:
            ctx.__exit__(None, None, None)
        except psycopg.errors.PipelineAborted:
            # Statements skipped after one that failed: that one's error was raised when its answer
            # came (to the statement waiting then); this is only its echo, and must not replace it.
            pass
        except psycopg.Error:
            if not quiet:
                raise

    def commit(self) -> None:
        """``COMMIT`` queued behind the statements not yet answered, all answered in one round trip.

        psycopg then sees the transaction ended, so SQLAlchemy's commit sends nothing more.
        """
        self.commit_sent = True  # from here on, whether it committed is not known if the connection breaks
        if self._ctx is None:
            return
        _call(lambda: self.raw.cursor().execute("COMMIT"))
        _call(self.leave)


def _leave_pipeline(conn: Connection, cursor: Any, statement: str, params: Any, context: Any, many: bool) -> None:
    """SQLAlchemy reads a statement's answer as soon as it is sent: not in pipeline mode."""
    pipe = conn.connection.info.get(_PIPE)
    if pipe is not None and pipe.active:
        _call(pipe.leave)


# A parameter in psycopg's (pyformat) SQL: ``%(name)s``.
_PARAM = re.compile(r"%\((\w+)\)s")


class _Plan:
    """A :class:`Prepared` statement compiled for psycopg once: its SQL, and the constants bound with every call.

    Built from SQLAlchemy's public compiler API only (:meth:`SQLCompiler.construct_expanded_state`
    renders the constants that must be spelled out, ``lit``, into the SQL). An ``IN`` list
    parameter becomes ``= ANY(array)`` (``NOT IN``: ``<> ALL(array)``), so the SQL does not
    depend on the list's length.
    """

    __slots__ = ("constants", "sql")

    def __init__(self, sql: str, constants: dict[str, Any]) -> None:
        self.sql = sql
        self.constants = constants

    def bind(self, params: Mapping[str, Any]) -> Mapping[str, Any]:
        return {**self.constants, **params} if self.constants else params

    @classmethod
    def build(cls, prepared: Prepared, dialect: Dialect) -> _Plan | None:
        """The plan, or None when the statement needs what only SQLAlchemy's path does (type processing)."""
        statement: Any = prepared.statement
        if any(_processed(column.type, dialect) for column in getattr(statement, "exported_columns", ())):
            return None
        compiled = statement.compile(dialect=dialect, column_keys=prepared.column_keys)
        if not isinstance(compiled, SQLCompiler) or compiled.escaped_bind_names:
            return None
        binds = compiled.bind_names
        if any(b.callable is not None or _bind_processor(b.type, dialect) for b in binds):
            return None
        lists = {name: bind for bind, name in binds.items() if bind.required and bind.expanding}
        sample = {name: [None] if name in lists else None for bind, name in binds.items() if bind.required}
        state = compiled.construct_expanded_state(sample, escape_names=False)
        sql = state.statement
        for name, bind in lists.items():
            (one,) = state.parameter_expansion[name]  # rendered "%(one)s", with psycopg's cast: "%(one)s::VARCHAR"
            array = f"%({name})s::{bind.type.compile(dialect=dialect)}[]"
            sql, found = re.subn(rf"(NOT )?IN \(%\({re.escape(one)}\)s(?:::[\w ]+)?\)", _any_or_all(array), sql)
            if found != 1:
                return None  # a list used twice, or not as IN (...): SQLAlchemy's path expands it
        constants: dict[str, Any] = {}
        for name in set(_PARAM.findall(sql)):
            if name in lists or name in sample:
                continue
            if name not in state.parameters:
                return None
            constants[name] = state.parameters[name]
        return cls(sql, constants)


def _any_or_all(array: str) -> Callable[[re.Match[str]], str]:
    def rendered(match: re.Match[str]) -> str:
        return f"<> ALL({array})" if match.group(1) else f"= ANY({array})"

    return rendered


def _bind_processor(type_: Any, dialect: Dialect) -> bool:
    """Whether SQLAlchemy converts this parameter's values (then the statement keeps its path)."""
    return type_.dialect_impl(dialect).bind_processor(dialect) is not None


def _processed(type_: Any, dialect: Dialect) -> bool:
    """Whether SQLAlchemy converts this result column's values (then the statement keeps its path)."""
    if type(type_) is Float and not type_.asdecimal:
        return False  # psycopg returns a float8 as a float, as SQLAlchemy would
    try:
        return type_.dialect_impl(dialect).result_processor(dialect, None) is not None
    except (TypeError, LookupError):  # a processor that depends on the column's type in the result
        return True


def _plan(stmt: Statement, dialect: Dialect) -> _Plan | None:
    if not isinstance(stmt, Prepared):
        return None
    try:
        return stmt.plans["postgresql"]  # type: ignore[no-any-return]
    except KeyError:
        plan = stmt.plans["postgresql"] = _Plan.build(stmt, dialect)
        return plan


_IDLE_SINCE = "memledger_idle_since"


def _note_idle(dbapi_conn: Any, record: Any) -> None:
    record.info[_IDLE_SINCE] = time.monotonic()


def _ping_if_idle(store: type[PostgresStore], engine: Engine) -> Any:
    def checkout(dbapi_conn: Any, record: Any, proxy: Any) -> None:
        idle_since = record.info.get(_IDLE_SINCE)  # None: a connection just opened
        if idle_since is None or time.monotonic() - idle_since < store.ping_after_idle_s:
            return
        try:
            engine.dialect.do_ping(dbapi_conn)
        except Exception as exc:
            # The pool discards this connection and checks out another (SQLAlchemy's documented recipe).
            raise DisconnectionError(f"a pooled connection stopped answering: {type(exc).__name__}") from exc

    return checkout
