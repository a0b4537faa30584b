"""Write ``docs/protocol.md``, the protocol reference, from the protocol's method table.

    python -m tools.protocol_doc            # rewrite docs/protocol.md
    python -m tools.protocol_doc --check    # exit 1 when docs/protocol.md is stale

Params (names, JSON types, required or default) come from each method's params model in
:data:`ledger.protocol.METHODS`; the methods the worker adds (``consolidation/notify_turn`` and any
other extra method) are found through :func:`worker.cli.rpc.rpc_extra_methods`, the same table
``memledger rpc`` serves. What a table cannot say — a summary, what a param means, the result's
fields, which errors a method gives and a working example — is written once in :data:`tools.protocol_doc.methods.DOCS`;
:func:`check_coverage` fails when a served method has no entry (or an entry serves no method).
Every example's answer is produced by running it (:mod:`tools.protocol_doc.examples`), never written
by hand; the same run fills the ``<!-- answer: METHOD -->`` regions of the other pages under
``docs/`` (``docs/packet.md`` shows the capabilities this way), and ``--check`` covers them too.
``tests/worker/test_protocol_doc.py`` checks each result has exactly the documented fields, and runs
every ``curl`` in the reference and the README against a running serve, comparing its answers with
the documented ones (ids and instants aside).
"""

from tools.protocol_doc.command import main
from tools.protocol_doc.methods import DOCS, RECORD_FIELDS, RESULTS
from tools.protocol_doc.render import check_coverage, render, request_json, served_methods

__all__ = ["DOCS", "RECORD_FIELDS", "RESULTS", "check_coverage", "main", "render", "request_json", "served_methods"]
