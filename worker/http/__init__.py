"""``memledger serve``: the record protocol, the MCP tools and the operator's views over HTTP.

* :mod:`worker.http.server` — the Starlette app, its routes and lifespan, and ``run_server`` (uvicorn).
* :mod:`worker.http.admission` — what ``POST /rpc`` and ``POST /mcp`` check before reading a request,
  and the ledger of the caller's account; :mod:`worker.http.tokens` — the API tokens it checks.
* :mod:`worker.http.limits` — requests in flight and the open-file limit.
* :mod:`worker.http.observe` — per-method RPC metrics and structured access logs (never a body).
* :mod:`worker.http.ops`, :mod:`worker.http.ops_page`, :mod:`worker.http.timeline` — ``GET /livez`` and the
  read-only ``GET /ops`` page (what it shows: :mod:`worker.snapshot`); :mod:`worker.http.guard` — who may
  read the operator's views.
"""
