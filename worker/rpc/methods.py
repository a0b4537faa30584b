"""The one table of the methods the worker adds to the record protocol (:data:`ledger.protocol.METHODS`).

``POST /rpc`` (:mod:`worker.http.server`), ``memledger rpc`` over stdio (:mod:`worker.rpc.stdio`), the
RPC metrics' method labels (:data:`NAMES`) and the protocol reference (``tools/protocol_doc``) all
read it. A method is one line here and a factory ``make(runtime, operator=...)`` returning its
function ``(led, params) -> result``, in its module:

* :mod:`worker.rpc.turns` — a chat turn (``consolidation/notify_turn``, ``memory/notify_turn``);
* :mod:`worker.rpc.account` — the account's consolidation settings;
* :mod:`worker.rpc.extraction` — the account's extraction settings.

``operator``: every caller is the operator (one account without tokens: ``rpc`` over stdio, a
``serve`` with ``MEMLEDGER_AUTH=none``), so the settings methods take the model target too; with
tokens on, callers are tenants and they refuse it (see :mod:`worker.rpc.account`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ledger import Ledger
from ledger.protocol import ExtraMethod
from worker.rpc.account import (
    GET_CONSOLIDATION_SETTINGS,
    UPDATE_CONSOLIDATION_SETTINGS,
    get_consolidation_settings,
    update_consolidation_settings,
)
from worker.rpc.extraction import (
    GET_EXTRACTION_SETTINGS,
    UPDATE_EXTRACTION_SETTINGS,
    get_extraction_settings,
    update_extraction_settings,
)
from worker.rpc.turns import CONSOLIDATION_NOTIFY_TURN, NOTIFY_TURN, consolidation_notify_turn, notify_turn

if TYPE_CHECKING:
    from worker.config import WorkerConfig
    from worker.runtime import Runtime

MethodFactory = Callable[..., ExtraMethod]  # make(runtime, *, operator) -> the method

# name -> its factory, in the order the reference lists the worker's methods.
TABLE: dict[str, MethodFactory] = {
    CONSOLIDATION_NOTIFY_TURN: consolidation_notify_turn,
    GET_CONSOLIDATION_SETTINGS: get_consolidation_settings,
    UPDATE_CONSOLIDATION_SETTINGS: update_consolidation_settings,
    NOTIFY_TURN: notify_turn,
    GET_EXTRACTION_SETTINGS: get_extraction_settings,
    UPDATE_EXTRACTION_SETTINGS: update_extraction_settings,
}
NAMES = tuple(TABLE)


def extra_methods(runtime: Runtime, *, operator: bool) -> dict[str, ExtraMethod]:
    """Every method the worker adds, bound to ``runtime`` (``serve`` and ``rpc`` alike)."""
    return {name: make(runtime, operator=operator) for name, make in TABLE.items()}


def operator_methods(led: Ledger, config: WorkerConfig) -> dict[str, ExtraMethod]:
    """The worker's methods for ``memledger rpc`` on ``led``: a runtime borrowing the ledger (it exports no
    gauges and leaves the ledger open). Over stdio the caller started the process on the operator's
    database: it is the operator."""
    from worker.runtime import build_runtime

    return extra_methods(build_runtime(config, ledger=led), operator=True)
