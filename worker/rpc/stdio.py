"""The record protocol on a byte stream, one JSON-RPC 2.0 request per line (``memledger rpc``, over stdio).

One response line per request line, flushed at once; blank lines and notifications get none. A line
over 1 MiB is refused (``-32600``) without being parsed, and bytes that are not UTF-8 are a parse
error. Errors of the ledger become JSON-RPC errors in :func:`ledger.protocol.handle_line`, the one
translation of this surface (as of ``POST /rpc``'s).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import BinaryIO

from ledger import Ledger
from ledger.protocol import INVALID_REQUEST, PARSE_ERROR, ExtraMethod, RpcError, dumps, error_response, handle_line

MAX_RPC_LINE_BYTES = 1 << 20


def _rpc_reply(led: Ledger, raw: bytes, extra: Mapping[str, ExtraMethod] | None) -> str | None:
    """The response line for one raw input line, or None (blank line, notification)."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError:
        return dumps(error_response(None, RpcError(PARSE_ERROR, "parse error: not UTF-8", reason="parse_error")))
    if not line.strip():
        return None
    return handle_line(led, line, extra_methods=extra)


def _discard_rest_of_line(instream: BinaryIO) -> None:
    while True:
        chunk = instream.readline(MAX_RPC_LINE_BYTES)
        if not chunk or chunk.endswith(b"\n"):
            return


def serve_stdio(
    led: Ledger, instream: BinaryIO, outstream: BinaryIO, *, extra_methods: Mapping[str, ExtraMethod] | None = None
) -> int:
    """Answer one JSON-RPC request per input line with one response line, flushed at once, until EOF.

    Blank lines and notifications get no line. A line over 1 MiB is refused
    (``-32600``) without being parsed. Returns how many lines were answered.
    """
    answered = 0
    while raw := instream.readline(MAX_RPC_LINE_BYTES + 1):
        if len(raw) > MAX_RPC_LINE_BYTES and not raw.endswith(b"\n"):
            _discard_rest_of_line(instream)
            big = RpcError(
                INVALID_REQUEST, "invalid request: a request line is limited to 1 MiB", reason="invalid_request"
            )
            reply: str | None = dumps(error_response(None, big))
        else:
            reply = _rpc_reply(led, raw, extra_methods)
        if reply is None:
            continue
        outstream.write(reply.encode("utf-8") + b"\n")
        outstream.flush()
        answered += 1
    return answered
