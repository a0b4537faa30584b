"""Operator visibility: what the database says about scopes, runs, backlog and the sweep.

* :mod:`worker.snapshot` — one read of everything an operator looks at (:class:`OpsSnapshot`).
* :mod:`worker.gauges` — the same as Prometheus gauges, read from the database at scrape time,
  with a bounded label set.
* :mod:`worker.http.observe` — per-method RPC metrics and structured access logs (never a body).
* :mod:`worker.http.timeline` — a scope's validity timeline as inline SVG.
* :mod:`worker.http.ops_page` — the read-only ``GET /ops`` page of ``memledger serve`` and who may see it.
"""
