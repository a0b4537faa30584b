"""The ledger as a Model Context Protocol server (docs/mcp.md), on the official ``mcp`` SDK.

Two transports, one tool table (:mod:`worker.mcp.tools`):

* **stdio** — ``memledger mcp``: the process an MCP client (Claude Desktop, Claude Code,
  an IDE) spawns; the bound account is the one the ledger was opened for
  (``MEMLEDGER_ACCOUNT``, default ``local``).
* **streamable HTTP** — ``/mcp`` on ``memledger serve`` (:class:`McpHttp`): stateless
  and JSON-answered, so any API node can serve any request and no session lives in a
  process. The account comes from the caller's request (``ledger_for``), never from
  the tool arguments.

Both are the SDK's low-level :class:`mcp.server.lowlevel.Server` with two handlers
(``tools/list`` and ``tools/call``). Tool calls do blocking database I/O, so they run in
a worker thread, never on the event loop.
"""

from __future__ import annotations

import io
import json
import logging
import os
import re
import sys
import threading
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator
from concurrent.futures import Future
from contextlib import AbstractAsyncContextManager, contextmanager, suppress
from functools import cache
from typing import TYPE_CHECKING, Any, BinaryIO, cast

import anyio
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.dispatcher import as_request_id, coerce_request_id
from mcp.shared.jsonrpc_dispatcher import cancelled_request_id_from_params
from mcp_types import (
    CallToolRequestParams,
    CallToolResult,
    JSONRPCNotification,
    JSONRPCRequest,
    ListToolsResult,
    PaginatedRequestParams,
    RequestId,
    Tool,
    jsonrpc_message_adapter,
)
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.types import Message, Receive, Scope, Send

from ledger import escape_line_breaks
from worker.errors import ToolFailure
from worker.mcp import NONCHARACTER

if TYPE_CHECKING:
    from ledger import Ledger

log = logging.getLogger(__name__)

SERVER_NAME = "memledger"
MCP_PATH = "/mcp"
MAX_MCP_REQUEST_BYTES = 1_000_000
INSTRUCTIONS = (
    "memledger holds the user's pinned memories: facts, preferences, decisions and constraints the user asked "
    "to be remembered. Read them with list_pins, search_pins, pins_as_of and pin_history; get_packet shows what a "
    "chat turn would be given. You cannot pin, edit, forget, accept or reject anything: propose_pin only stores a "
    "suggestion that waits for the user's decision, and it reaches no chat until the user accepts it."
)
LOOPBACK_HOSTS = ("127.0.0.1", "localhost", "[::1]")

LedgerFor = Callable[[ServerRequestContext[Any, Any]], "Ledger"]
"""Which ledger (which account) serves one request; called in the worker thread, may do I/O."""


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("memledger")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "0"


@cache
def described_tools() -> list[Tool]:
    """:data:`~worker.mcp.tools.TOOLS` as ``tools/list`` gives them.

    The tools' module loads the ledger's models, so it is imported here, on first use: ``initialize`` is
    answered before (a thread of the server's, never its event loop).
    """
    from worker.mcp.tools import TOOLS

    return [spec.describe() for spec in TOOLS.values()]


def build_server(ledger_for: LedgerFor) -> Server[Any]:
    """The MCP server: ``tools/list`` lists :data:`~worker.mcp.tools.TOOLS`; ``tools/call`` runs one.

    ``ledger_for(ctx)`` picks the account for each call. A failure there (say, the
    database is unreachable) is answered as an ``internal_error`` tool result. Neither the tools
    nor the ledger are loaded to answer ``initialize``.
    """

    async def list_tools(
        _ctx: ServerRequestContext[Any, Any], _params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        return ListToolsResult(tools=await anyio.to_thread.run_sync(described_tools))

    async def on_call_tool(ctx: ServerRequestContext[Any, Any], params: CallToolRequestParams) -> CallToolResult:
        def run() -> CallToolResult:
            from worker.mcp.tools import call_tool, error_result, logged_name

            try:
                led = ledger_for(ctx)
            except Exception:
                log.exception("internal error choosing the ledger for MCP tool %s", logged_name(params.name))
                return error_result(ToolFailure("internal_error", "internal error: the server logged it; try again"))
            return call_tool(led, params.name, params.arguments)

        return await anyio.to_thread.run_sync(run)

    return Server(
        SERVER_NAME,
        version=_version(),
        title="memledger: the user's memory ledger",
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=on_call_tool,
    )


# ---------------------------------------------------------------------- stdio
_LONE_SURROGATE = re.compile("[\ud800-\udfff]")


def mark_lone_surrogates(line: str) -> str:
    """``line`` with every lone surrogate its JSON escapes (``"\\ud800"``) turned into U+FFFF.

    The SDK's JSON reader refuses such a line, and on stdio it then answers nothing at
    all, so the client would wait for ever. Python's reader accepts it; with the
    surrogate marked, the request reaches the tool, whose argument check answers
    ``invalid_params`` naming the field. A line without ``\\u`` escapes, that is not JSON at
    all, or that nests too deep to walk, is passed on unchanged (the SDK refuses it as usual).
    """
    if "\\u" not in line:
        return line
    try:
        marked, changed = _mark(json.loads(line))
        return json.dumps(marked, ensure_ascii=False) + "\n" if changed else line
    except (ValueError, RecursionError):  # nested deeper than walking it allows: the SDK refuses it too
        return line


def _mark(value: Any) -> tuple[Any, bool]:
    if isinstance(value, str):
        marked = _LONE_SURROGATE.sub(NONCHARACTER, value)
        return marked, marked != value
    if isinstance(value, list):
        items = [_mark(v) for v in value]
        return [v for v, _ in items], any(c for _, c in items)
    if isinstance(value, dict):
        pairs = [(_mark(k), _mark(v)) for k, v in value.items()]
        return {k: v for (k, _), (v, _) in pairs}, any(ck or cv for (_, ck), (_, cv) in pairs)
    return value, False


DRAIN_TIMEOUT_S = 60.0
"""How long ``memledger mcp`` waits, once stdin is closed, for the answers still owed (tool calls are bounded
by the database's own timeouts; this only keeps a wedged call from holding the process for ever)."""


def _messages(line: str) -> list[dict[str, Any]]:
    """The JSON-RPC messages of one line (a message or a batch); [] for anything else."""
    try:
        found = json.loads(line)
    except (ValueError, RecursionError):
        return []
    items = found if isinstance(found, list) else [found]
    return [item for item in items if isinstance(item, dict)]


class _Owed:
    """The requests read from stdin and not answered yet, so closing stdin does not drop them.

    The SDK ends its serving loop (and cancels the calls in flight) as soon as its input ends; a
    client that writes its requests and closes stdin would lose the answers. So the end of stdin is
    held back until every request read has its answer written (or was cancelled by the client).
    """

    def __init__(self) -> None:
        self._ids: Counter[RequestId] = Counter()  # an id sent twice is answered twice
        self._answered = anyio.Event()

    def read(self, line: str) -> None:
        """Count ``line`` (as the SDK will be handed it) if the SDK reads a request in it: only those are answered.

        A line the SDK cannot read (a batch, a bad envelope) or reads as a notification (an id that is
        neither an integer nor a string, such as ``1.5``) gets no answer from it, so none is waited for.
        """
        try:
            message = jsonrpc_message_adapter.validate_json(line, by_name=False)
        except ValueError:  # pydantic's ValidationError: the SDK drops the line
            return
        if isinstance(message, JSONRPCRequest):
            self._ids[coerce_request_id(message.id)] += 1
        elif isinstance(message, JSONRPCNotification) and message.method == "notifications/cancelled":
            # The SDK never answers a request it cancels, and it finds the request as it does here: "7" cancels 7.
            self._settle(cancelled_request_id_from_params(message.params))

    def written(self, text: str) -> None:
        if not self._ids:
            return
        for message in _messages(text):
            if "method" not in message and ("result" in message or "error" in message):
                self._settle(as_request_id(message.get("id")))

    def _settle(self, request_id: RequestId | None) -> None:
        if request_id is None:
            return
        key = coerce_request_id(request_id)
        if self._ids[key] > 1:
            self._ids[key] -= 1
        else:
            self._ids.pop(key, None)
        if not self._ids:
            self._answered.set()

    async def all_answered(self, timeout_s: float) -> None:
        if not self._ids:
            return
        self._answered = anyio.Event()
        with anyio.move_on_after(timeout_s):
            await self._answered.wait()
        if self._ids:
            log.warning(
                "memledger mcp: stdin closed; %d request(s) left unanswered after %gs", self._ids.total(), timeout_s
            )


class _StdinLines:
    """The process's stdin as the async line iterator ``stdio_server`` reads, surrogates marked; its end is held
    back until every request read is answered (:class:`_Owed`)."""

    def __init__(self, owed: _Owed) -> None:
        self._lines = anyio.wrap_file(io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace"))
        self._owed = owed

    def __aiter__(self) -> _StdinLines:
        return self

    async def __anext__(self) -> str:
        line = await self._lines.readline()
        if not line:
            await self._owed.all_answered(DRAIN_TIMEOUT_S)
            raise StopAsyncIteration
        marked = mark_lone_surrogates(line)
        self._owed.read(marked)
        return marked


class _StdoutLines:
    """The wire ``stdio_server`` writes to: each message line with U+0085, U+2028 and U+2029 escaped.

    The SDK writes pydantic's JSON, which leaves those three raw inside strings; a client that
    splits its input with ``str.splitlines()`` would read a body holding one as two lines.
    """

    def __init__(self, wire: BinaryIO, owed: _Owed, *, flushed: Callable[[], None]) -> None:
        self._wire = anyio.wrap_file(wire)
        self._owed = owed
        self._flushed = flushed

    async def write(self, text: str) -> int:
        await self._wire.write(escape_line_breaks(text).encode("utf-8"))
        self._owed.written(text)
        return len(text)

    async def flush(self) -> None:
        await self._wire.flush()
        self._flushed()


@contextmanager
def _claim_stdout() -> Iterator[BinaryIO]:
    """A private duplicate of fd 1 for the wire, with fd 1 pointed at stderr while serving.

    The SDK does this itself unless given its stdout: stray output of a library then lands
    on stderr, not inside the protocol. Where fd 1 cannot be duplicated, the wire is
    ``sys.stdout``'s own buffer.
    """
    sys.stdout.flush()
    try:
        wire_fd = os.dup(1)
    except (OSError, ValueError, io.UnsupportedOperation):
        yield sys.stdout.buffer
        return
    try:
        os.dup2(2, 1)
    except OSError:
        os.close(wire_fd)
        yield sys.stdout.buffer
        return
    wire = os.fdopen(wire_fd, "wb", closefd=False)
    try:
        yield wire
    finally:
        with suppress(OSError, ValueError):
            wire.flush()
        os.dup2(wire_fd, 1)
        os.close(wire_fd)


class LedgerOpening:
    """The ledger ``memledger mcp`` serves, opened on a thread of its own once asked for.

    ``open_ledger`` is called once, on that thread, when :meth:`start` is first called (the
    stdio server calls it once its first answer is on the wire) or when the ledger is first
    wanted (:meth:`ledger`). Until then the server answers ``initialize`` without the ledger's
    modules: the two would only share one interpreter's time, and the client waits for the answer.
    """

    def __init__(self, open_ledger: Callable[[], Ledger]) -> None:
        self._open_ledger = open_ledger
        self._opened: Future[Ledger] = Future()
        self._lock = threading.Lock()
        self._started = False

    def start(self) -> None:
        """Begin opening the ledger, unless it is begun (cheap: the stdio server calls it after every answer)."""
        if self._started:
            return
        with self._lock:
            if self._started:
                return
            self._started = True
        threading.Thread(target=self._open, name="memledger-mcp-ledger", daemon=True).start()

    def _open(self) -> None:
        try:
            led = self._open_ledger()
        except BaseException as exc:  # whatever it is, the callers waiting in ledger() get it
            self._opened.set_exception(exc)
        else:
            log.info("memledger mcp serving %s over stdio", led.scope_key)
            self._opened.set_result(led)

    def ledger(self) -> Ledger:
        """The ledger, once open (blocking; it starts the opening if nothing did). Raises what opening it raised."""
        self.start()
        return self._opened.result()

    def close(self) -> None:
        """Close the ledger if it was opened or is being opened (waiting for that), else nothing."""
        if self._started and self._opened.exception() is None:
            self._opened.result().close()


async def serve_stdio(opening: LedgerOpening) -> None:
    """Serve MCP on this process's stdin/stdout until the client closes stdin, then answer what it asked."""
    server = build_server(lambda _ctx: opening.ledger())
    owed = _Owed()
    stdin = cast("anyio.AsyncFile[str]", _StdinLines(owed))  # stdio_server only iterates over its lines
    with _claim_stdout() as wire:
        # stdio_server only writes and flushes; each answer on the wire, the ledger is opened if it is not yet
        stdout = cast("anyio.AsyncFile[str]", _StdoutLines(wire, owed, flushed=opening.start))
        async with stdio_server(stdin=stdin, stdout=stdout) as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())


def run_stdio(open_ledger: Callable[[], Ledger]) -> None:
    """The body of ``memledger mcp``: serve until the client closes stdin and has its answers, then close the ledger.

    The ledger is opened by ``open_ledger`` on a thread (:class:`LedgerOpening`) once ``initialize``
    is answered. A client that leaves before has it opened all the same, so that a ledger that
    cannot be opened is reported (what ``open_ledger`` raises is raised here) whatever the client did.
    """
    opening = LedgerOpening(open_ledger)
    try:
        anyio.run(serve_stdio, opening)
        opening.ledger()
    finally:
        opening.close()


# ---------------------------------------------------------------------- streamable HTTP
def loopback_security(*, extra_hosts: tuple[str, ...] = (), origins: tuple[str, ...] = ()) -> TransportSecuritySettings:
    """Host and Origin checks for a loopback server (DNS rebinding, forged browser requests).

    A ``Host`` that is not a loopback name (or one of ``extra_hosts``) is refused with 421;
    a request with an ``Origin`` not in ``origins`` is refused with 403 (no web page is
    allowed by default: a page on any site, local ones included, is not the user).
    """
    hosts = [*LOOPBACK_HOSTS, *extra_hosts]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[*hosts, *(f"{h}:*" for h in hosts)],
        allowed_origins=list(origins),
    )


Admit = Callable[[Request], Awaitable[Response | bytes | None]]
"""The host app's own checks of one ``/mcp`` request (Host, Origin, token, body): a refusal
(a response), the body when it read it itself (bounded, with a timeout), or None to go on.

It may record who the caller is on ``request.state`` for ``ledger_for`` to read
(``ctx.request.state`` is the same state)."""


class McpHttp:
    """``/mcp``: the MCP server over streamable HTTP, as an ASGI app to mount on ``serve``.

    Stateless (no ``Mcp-Session-Id`` kept in the process) with JSON answers, POST only,
    bodies bounded at ``max_request_bytes``. With ``admit`` the host app checks Host,
    Origin and the caller itself (the same checks as ``/rpc``, docs/operations.md); without it the
    SDK's transport security allows loopback names and no web page
    (:func:`loopback_security`). Enter :meth:`run` in the host app's lifespan.
    """

    def __init__(
        self,
        ledger_for: LedgerFor,
        *,
        admit: Admit | None = None,
        security: TransportSecuritySettings | None = None,
        max_request_bytes: int = MAX_MCP_REQUEST_BYTES,
    ) -> None:
        if security is None:
            no_checks = TransportSecuritySettings(enable_dns_rebinding_protection=False)
            security = no_checks if admit is not None else loopback_security()
        self.admit = admit
        self.server = build_server(ledger_for)
        described_tools()  # built here (serve builds this endpoint on a thread), not by the first tools/list
        self.manager = StreamableHTTPSessionManager(
            app=self.server,
            json_response=True,
            stateless=True,
            security_settings=security,
            max_request_body_size=max_request_bytes,
        )

    def run(self) -> AbstractAsyncContextManager[None]:
        """The session manager's task group; must be running while requests are served."""
        return self.manager.run()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] != "POST":
            # Stateless: there is no session to stream to or to end, so a GET (an SSE stream that
            # would hold a connection open for nothing) or a DELETE is answered 405, as MCP allows.
            refusal = PlainTextResponse("/mcp takes POST only", status_code=405, headers={"Allow": "POST"})
            await refusal(scope, receive, send)
            return
        if scope["type"] == "http":
            scope = _media_type_lowercased(scope)
        if self.admit is not None and scope["type"] == "http":
            admitted = await self.admit(Request(scope, receive))
            if isinstance(admitted, Response):
                await admitted(scope, receive, send)
                return
            if admitted is not None:  # the host app read the body: hand the SDK the same bytes
                receive = _replay(admitted, receive)
        await self.manager.handle_request(scope, receive, send)


def _media_type_lowercased(scope: Scope) -> Scope:
    """``scope`` with the media type of its ``Content-Type`` in lower case (parameters kept).

    Media types are case-insensitive (RFC 9110), and ``/rpc`` takes ``Application/JSON``;
    the SDK compares the header with ``application/json`` exactly, so it is normalized here.
    """
    headers = []
    for name, value in scope["headers"]:
        if name.lower() == b"content-type":
            media, sep, params = value.partition(b";")
            value = media.lower() + sep + params
        headers.append((name, value))
    return {**scope, "headers": headers}


def _replay(body: bytes, receive: Receive) -> Receive:
    """A ``receive`` that yields ``body`` as the whole request, then whatever the connection sends next."""
    pending = [{"type": "http.request", "body": body, "more_body": False}]

    async def replayed() -> Message:
        return pending.pop() if pending else await receive()

    return replayed
