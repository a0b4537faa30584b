"""The MCP tools over one bound ledger (:mod:`worker.mcp.tools`, no transport) and their server on
stdio and streamable HTTP (:mod:`worker.mcp.server`, the MCP SDK). See docs/mcp.md."""

NONCHARACTER = "\uffff"
"""U+FFFF, what the stdio transport puts where a client's JSON carried a lone surrogate
(:func:`worker.mcp.server.mark_lone_surrogates`), and what the tools refuse as such. Here, not in either
module, because the server marks requests before the tools (and the ledger they load) are imported."""
