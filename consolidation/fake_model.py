"""The loopback fake model server both fakes share: a real HTTP server on 127.0.0.1, scripted per reply.

Like httpx's ``MockTransport`` or dramatiq's ``StubBroker``, it ships in the package
so every test fakes the model at the I/O boundary: the real SDK talks HTTP to a real
server. :mod:`consolidation.fake_anthropic` speaks the Messages API on it,
:mod:`consolidation.fake_openai` Chat Completions.

Behaviour is scriptable, per server (the default reply) and per request (a queue of
:class:`Reply` consumed first, one per request):

* scripted operations — a list, or a callable ``(request_json) -> list`` — sent as
  ``{"operations": [...]}``; an operation may name its targets by body
  (``target_bodies``, see :func:`resolve_target_bodies`), since a run's ids are per run;
  or ``text`` (anything, garbage included);
* scripted ``proposals`` (the same forms) sent as ``{"proposals": [...]}`` to extraction
  requests (a user message that opens with ``<conversation>``; ``[]`` when unscripted);
* ``delay_s`` before answering (the wait ends early when the server stops);
* an HTTP error status (429, 529, 500, …) with the API's error body, optionally with
  ``retry-after``; ``fail_next(429, 529)`` queues statuses before the default reply;
* ``drop``: close the connection after reading the request, without a response;
* ``trickle_s``: send the answer's body one byte at a time, this many seconds apart (a server
  that drips its answer; every read the client makes gets a byte well inside any per-read
  timeout), stopping when the client hangs up;
* the usage to report (input, output, cache write and cache read tokens); by default
  about one token per four characters.

``calls`` (thread-safe) counts requests that reached the API's path; ``requests`` holds each
one's parsed JSON body and headers; ``hangups`` counts answers the client hung up on before
the last byte (:meth:`FakeModelServer.wait_for_hangups`). ``counter_file`` (optional) is
rewritten with the call count as each request arrives, so a test in another process
(one that kills a worker mid-call) can see that the request landed.

As a separate process (:mod:`consolidation.fake_process`)::

    python -m consolidation.fake_anthropic --port 8765 [--script FILE.json] [--delay S]
        [--trickle S] [--counter-file PATH]

prints its base URL on the first line of stdout and serves until SIGTERM or SIGINT.
The script file is a JSON list of operations, or an object with any of
``operations``, ``text``, ``delay_s``, ``trickle_s``, ``usage``, ``statuses``, ``retry_after_s``
and ``replies`` (a list of :class:`Reply` fields).
"""

from __future__ import annotations

import itertools
import json
import math
import os
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, ClassVar, Self

if TYPE_CHECKING:
    from consolidation.harnesses.base import PromptRecord

OperationsScript = Sequence[Mapping[str, Any]] | Callable[[dict[str, Any]], Sequence[Mapping[str, Any]]]

_USAGE_FIELDS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


@dataclass(frozen=True, slots=True)
class Reply:
    """One scripted reply. Unset fields fall back to the server's defaults."""

    status: int = 200
    delay_s: float | None = None
    operations: OperationsScript | None = None
    text: str | None = None
    usage: Mapping[str, int] | None = None
    stop_reason: str = "end_turn"
    retry_after_s: float | None = None
    drop: bool = False
    proposals: OperationsScript | None = None  # the answer to an extraction request (see _is_extraction)
    refusal: str | None = None  # Chat Completions only: the model declines (``message.refusal``)
    trickle_s: float | None = None  # seconds between the bytes of the answer's body


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """A request as the fake received it."""

    method: str
    path: str
    headers: dict[str, str]
    json: Any
    received_at: float = field(default_factory=time.monotonic)


def _estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


def _request_text(body: Mapping[str, Any]) -> str:
    parts: list[str] = []
    system = body.get("system")
    if isinstance(system, str):
        parts.append(system)
    elif isinstance(system, list):
        parts.extend(str(block.get("text", "")) for block in system if isinstance(block, Mapping))
    for message in body.get("messages") or []:
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts.extend(str(block.get("text", "")) for block in content if isinstance(block, Mapping))
    return "".join(parts)


class _Server(ThreadingHTTPServer):
    allow_reuse_address = True
    daemon_threads = False  # joined on close; delays end early when the fake stops
    # socketserver's default backlog is 5: a burst of concurrent clients on a loaded machine
    # would otherwise wait out SYN retries and time out before they are accepted.
    request_queue_size = 128
    fake: FakeModelServer

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that timed out and hung up is expected here, not an error worth a traceback.
        if isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError)):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    timeout = 30  # never let a silent client pin a handler thread forever

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the default stderr access log."""

    def _send_json(
        self,
        status: int,
        payload: Mapping[str, Any],
        headers: Mapping[str, str] | None = None,
        *,
        trickle_s: float | None = None,
    ) -> None:
        self.send_body(status, json.dumps(payload).encode(), headers, trickle_s=trickle_s)

    def send_body(
        self,
        status: int,
        data: bytes,
        headers: Mapping[str, str] | None = None,
        *,
        trickle_s: float | None = None,
        content_type: str = "application/json",
    ) -> None:
        """Answer ``data`` (at once, or a byte every ``trickle_s`` seconds); a client that hangs up is counted."""
        try:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("request-id", f"req_fake_{self.server.fake.calls:04d}")
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            if trickle_s:
                self.server.fake._trickle(self.wfile, data, trickle_s)
            else:
                self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.server.fake._hung_up()  # the client gave up waiting

    def _send_error(self, status: int, message: str, headers: Mapping[str, str] | None = None) -> None:
        self._send_json(status, self.server.fake._error_body(status, message), headers)

    def do_GET(self) -> None:
        fake = self.server.fake
        path = self.path.split("?", 1)[0].rstrip("/")
        found = fake._get(path)
        if found is not None:  # what a subclass serves (llama.cpp's /props)
            self._send_json(200, found)
        elif path != MODELS_PATH:
            self._send_error(404, f"the fake serves POST {fake.PATH} and GET {MODELS_PATH}, not GET {self.path}")
        elif not fake._key_accepted(self.headers):
            self._send_error(401, "invalid x-api-key / Authorization: the key is not the fake's")
        else:  # the models list both APIs serve (not a model call: not counted)
            self._send_json(200, {"object": "list", "data": [{"id": m, "object": "model"} for m in fake.models]})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        path = self.server.fake.PATH
        if self.path.split("?", 1)[0].rstrip("/") != path:
            self._send_error(404, f"the fake serves only POST {path}, not {self.path}")
            return
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            body = None
        fake = self.server.fake
        reply = fake._arrive(RecordedRequest("POST", self.path, dict(self.headers.items()), body))
        fake._respond(self, body, reply)


MODELS_PATH = "/v1/models"
"""Both APIs list their models here (``GET``); what a settings check asks first."""


class FakeModelServer:
    """A real HTTP server on 127.0.0.1 that answers like a model API; see the module docstring.

    The lifecycle, the scripting and the observation are here; a subclass says what the wire
    looks like (:attr:`PATH`, :meth:`_error_body`, :meth:`_invalid_request`, :meth:`_payload`).
    Use it as a context manager (or call :meth:`start` and :meth:`stop`); the port is
    free-picked unless given. Every method is thread-safe.
    """

    PATH: ClassVar[str]
    """The one path served (``POST``)."""

    def __init__(
        self,
        *,
        operations: OperationsScript | None = None,
        text: str | None = None,
        delay_s: float = 0.0,
        trickle_s: float | None = None,
        usage: Mapping[str, int] | None = None,
        statuses: Iterable[int] = (),
        retry_after_s: float | None = None,
        replies: Iterable[Reply] = (),
        proposals: OperationsScript | None = None,
        counter_file: str | os.PathLike[str] | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        models: Iterable[str] = (),
        api_key: str | None = None,
    ) -> None:
        # GET /v1/models lists ``models``; with ``api_key``, a request sending another key (Bearer or x-api-key)
        # gets 401 there, as the vendors' servers answer a wrong key.
        self.models = tuple(models)
        self._api_key = api_key
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._arrived = threading.Condition(self._lock)
        self._default = Reply(
            operations=operations, text=text, delay_s=delay_s, usage=usage, proposals=proposals, trickle_s=trickle_s
        )
        self._queue: deque[Reply] = deque()
        self._calls = 0
        self._hangups = 0
        self._requests: list[RecordedRequest] = []
        self._message_ids = itertools.count(1)
        self._counter_file = Path(counter_file) if counter_file is not None else None
        self._host = host
        self._port = port
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.fail_next(*statuses, retry_after_s=retry_after_s)
        self.push(*replies)

    def _key_accepted(self, headers: Any) -> bool:
        if self._api_key is None:
            return True
        sent = headers.get("x-api-key") or (headers.get("Authorization") or "").removeprefix("Bearer ")
        return bool(sent == self._api_key)

    # -- lifecycle ---------------------------------------------------------------

    def start(self) -> Self:
        """Bind and serve in a background thread; returns ``self``."""
        if self._server is not None:
            raise RuntimeError("the fake is already running")
        server = _Server((self._host, self._port), _Handler)
        server.fake = self
        self._server = server
        self._stopping.clear()
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.05}, name=f"fake-{type(self).__name__}", daemon=True
        )
        self._thread.start()
        self._write_counter(self.calls)
        return self

    def stop(self) -> None:
        """Stop serving, end pending delays, join every handler thread and close the socket."""
        server, thread = self._server, self._thread
        if server is None:
            return
        self._stopping.set()
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join()
        self._server = self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The bound port (after :meth:`start`)."""
        if self._server is None:
            raise RuntimeError("the fake is not running")
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """What to pass as the SDK's ``base_url`` (or ``ANTHROPIC_BASE_URL``)."""
        return f"http://{self._host}:{self.port}"

    # -- observation -------------------------------------------------------------

    @property
    def calls(self) -> int:
        """Requests that reached ``POST /v1/messages``."""
        with self._lock:
            return self._calls

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received, oldest first (a copy)."""
        with self._lock:
            return list(self._requests)

    def wait_for_calls(self, count: int, *, timeout_s: float = 5.0) -> bool:
        """Block until at least ``count`` requests arrived; false on timeout."""
        with self._arrived:
            return self._arrived.wait_for(lambda: self._calls >= count, timeout=timeout_s)

    @property
    def hangups(self) -> int:
        """Answers the client hung up on before their last byte (it gave the call up)."""
        with self._lock:
            return self._hangups

    def wait_for_hangups(self, count: int, *, timeout_s: float = 5.0) -> bool:
        """Block until the client hung up on at least ``count`` answers; false on timeout."""
        with self._arrived:
            return self._arrived.wait_for(lambda: self._hangups >= count, timeout=timeout_s)

    # -- scripting ---------------------------------------------------------------

    def push(self, *replies: Reply) -> None:
        """Queue replies for the next requests, one each, before the default reply."""
        with self._lock:
            self._queue.extend(replies)

    def fail_next(self, *statuses: int, retry_after_s: float | None = None) -> None:
        """Answer the next requests with these HTTP statuses, in order."""
        self.push(*(Reply(status=status, retry_after_s=retry_after_s) for status in statuses))

    def set_operations(self, operations: OperationsScript) -> None:
        """Default reply: ``{"operations": operations}`` (a list or a callable of the request JSON)."""
        self._set_default(operations=operations, text=None)

    def set_proposals(self, proposals: OperationsScript) -> None:
        """Default reply to extraction requests: ``{"proposals": proposals}`` (a list or a callable)."""
        self._set_default(proposals=proposals, text=None)

    def set_text(self, text: str) -> None:
        """Default reply: this exact text (garbage included)."""
        self._set_default(text=text, operations=None)

    def set_delay(self, delay_s: float) -> None:
        """Default reply: wait this long before answering."""
        self._set_default(delay_s=delay_s)

    def set_trickle(self, trickle_s: float | None) -> None:
        """Default reply: send the body one byte every ``trickle_s`` seconds (None: at once)."""
        self._set_default(trickle_s=trickle_s)

    def set_usage(self, **usage: int) -> None:
        """Default reply: report this usage (``input_tokens``, ``output_tokens``, cache fields)."""
        unknown = set(usage) - set(_USAGE_FIELDS)
        if unknown:
            raise ValueError(f"unknown usage field(s) {sorted(unknown)}; allowed: {list(_USAGE_FIELDS)}")
        self._set_default(usage=dict(usage))

    def reset(self) -> None:
        """Forget recorded requests, the call count and queued replies (defaults stay)."""
        with self._lock:
            self._queue.clear()
            self._requests.clear()
            self._calls = 0
        self._write_counter(0)

    def _set_default(self, **changes: Any) -> None:
        with self._lock:
            current = {name: getattr(self._default, name) for name in Reply.__dataclass_fields__}
            current.update(changes)
            self._default = Reply(**current)

    # -- serving (handler threads) -----------------------------------------------

    def _arrive(self, request: RecordedRequest) -> Reply:
        with self._arrived:
            self._calls += 1
            calls = self._calls
            self._requests.append(request)
            reply = self._queue.popleft() if self._queue else self._default
            default = self._default
            self._arrived.notify_all()
        self._write_counter(calls)
        if reply is default:
            return reply
        return Reply(
            status=reply.status,
            delay_s=reply.delay_s if reply.delay_s is not None else default.delay_s,
            operations=reply.operations
            if reply.operations is not None or reply.text is not None
            else default.operations,
            text=reply.text if reply.text is not None or reply.operations is not None else default.text,
            usage=reply.usage if reply.usage is not None else default.usage,
            stop_reason=reply.stop_reason,
            retry_after_s=reply.retry_after_s,
            drop=reply.drop,
            proposals=reply.proposals if reply.proposals is not None else default.proposals,
            refusal=reply.refusal,
            trickle_s=reply.trickle_s if reply.trickle_s is not None else default.trickle_s,
        )

    def _write_counter(self, calls: int) -> None:
        if self._counter_file is None:
            return
        temporary = self._counter_file.with_name(f".{self._counter_file.name}.{threading.get_ident()}.tmp")
        temporary.write_text(f"{calls}\n")
        os.replace(temporary, self._counter_file)

    def _respond(self, handler: _Handler, body: Any, reply: Reply) -> None:
        if reply.delay_s and self._stopping.wait(reply.delay_s):
            return  # stopping: hang up instead of answering late
        if reply.drop:
            handler.close_connection = True
            return
        headers = {"retry-after": f"{reply.retry_after_s:g}"} if reply.retry_after_s is not None else {}
        if reply.status != 200:
            handler._send_error(reply.status, f"scripted HTTP {reply.status} from the fake", headers)
            return
        problem = self._invalid_request(body)
        if problem is not None:
            handler._send_error(self._refusal_status(problem), problem)
            return
        text = self._answer_text(body, reply)
        usage = {name: 0 for name in _USAGE_FIELDS}
        if reply.usage is None:
            usage["input_tokens"] = _estimate_tokens(_request_text(body))
            usage["output_tokens"] = _estimate_tokens(text)
        else:
            usage.update({name: int(value) for name, value in reply.usage.items()})
        with self._lock:
            number = next(self._message_ids)
        self._send_answer(handler, body, reply, text=text, usage=usage, number=number)

    def _send_answer(
        self, handler: _Handler, body: dict[str, Any], reply: Reply, *, text: str, usage: dict[str, int], number: int
    ) -> None:
        """Send a successful answer (a subclass may stream it)."""
        handler._send_json(
            200, self._payload(body, reply, text=text, usage=usage, number=number), trickle_s=reply.trickle_s
        )

    def _trickle(self, out: Any, data: bytes, trickle_s: float) -> None:
        """Write ``data`` one byte every ``trickle_s`` seconds (raises BrokenPipeError when the client hangs up)."""
        for index in range(len(data)):
            if self._stopping.wait(trickle_s):
                return
            out.write(data[index : index + 1])
            out.flush()

    def _hung_up(self) -> None:
        with self._arrived:
            self._hangups += 1
            self._arrived.notify_all()

    # -- the wire (a subclass per API) ----------------------------------------------

    def _error_body(self, status: int, message: str) -> dict[str, Any]:
        """The JSON body of an error answer."""
        raise NotImplementedError

    def _invalid_request(self, body: Any) -> str | None:
        """What the real API would refuse with HTTP 400, for the fields the harness sends."""
        raise NotImplementedError

    def _refusal_status(self, problem: str) -> int:
        """The HTTP status of a refusal of the request for ``problem`` (400 unless a subclass says otherwise)."""
        return 400

    def _get(self, path: str) -> dict[str, Any] | None:
        """The JSON a ``GET`` of ``path`` answers (None: 404); none unless a subclass serves one."""
        return None

    def _payload(
        self, body: dict[str, Any], reply: Reply, *, text: str, usage: dict[str, int], number: int
    ) -> dict[str, Any]:
        """The JSON body of a successful answer carrying ``text`` and ``usage`` (Anthropic's field names)."""
        raise NotImplementedError

    def _answer_text(self, body: dict[str, Any], reply: Reply) -> str:
        if reply.text is not None:
            text = reply.text
        elif _is_extraction(body):
            script = reply.proposals if reply.proposals is not None else []
            proposals = script(body) if callable(script) else script
            text = json.dumps({"proposals": list(proposals)})
        else:
            script = reply.operations if reply.operations is not None else []
            operations = script(body) if callable(script) else script
            text = json.dumps({"operations": resolve_target_bodies(body, operations)})
        return text


def user_message(body: Mapping[str, Any]) -> str | None:
    """The text of a request's (first) user message, in either API's shape; None when there is none."""
    for message in body.get("messages") or []:
        if isinstance(message, Mapping) and message.get("role", "user") == "user":
            content = message.get("content")
            return content if isinstance(content, str) else None
    return None


def _is_extraction(body: Mapping[str, Any]) -> bool:
    """An extraction request: its user message opens with the conversation tag."""
    content = user_message(body)
    return isinstance(content, str) and content.startswith("<conversation>")


def request_records(body: Mapping[str, Any]) -> list[PromptRecord]:
    """The records a consolidation request carries (decoded from its one user message); [] when it has none."""
    from consolidation.prompt import OPEN_TAG, decode_user_message

    content = user_message(body)
    if not isinstance(content, str) or OPEN_TAG not in content:
        return []
    try:  # the records open the message, or follow the instructions of a request with no system role
        return decode_user_message(content[content.index(OPEN_TAG) :])
    except ValueError:
        return []


def resolve_target_bodies(body: Mapping[str, Any], operations: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Scripted operations with ``target_bodies`` turned into ``targets``: the ids the request showed for those bodies.

    A script cannot know a run's per-run ids in advance, so it may name its targets by
    body (``{"op": "group", "target_bodies": ["I live in Paris", "I live in Lyon"],
    "subject": "home city"}``). A body the request did not carry becomes the target
    ``"absent:<body>"``, which the gate refuses as not in the scope.
    """
    ids = {record.body: record.id for record in request_records(body)}
    resolved = []
    for operation in operations:
        op = dict(operation)
        bodies = op.pop("target_bodies", None)
        if isinstance(bodies, list):
            op["targets"] = [ids.get(b, f"absent:{b}") if isinstance(b, str) else b for b in bodies]
        resolved.append(op)
    return resolved
