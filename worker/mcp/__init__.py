"""The MCP tools over one bound ledger (:mod:`worker.mcp.tools`, no transport) and their server on
stdio and streamable HTTP (:mod:`worker.mcp.server`, the MCP SDK). See docs/mcp.md."""
