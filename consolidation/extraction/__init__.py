"""Extraction (docs/extraction.md): proposals from a conversation.

* :mod:`~consolidation.extraction.digest` — the bounded per-session digest;
* :mod:`~consolidation.extraction.prompt` — the one user message, the answer schema, the parser;
* :mod:`~consolidation.extraction.gate` — which proposals may be stored;
* :mod:`~consolidation.extraction.models` — the settings as the API hands them out;
* :mod:`~consolidation.extraction.settings` — per-scope settings: defaults, checks, storage;
* :mod:`~consolidation.extraction.service` — debounced runs in the shared runs table.

Harnesses: ``consolidation/harnesses/extract_{base,anthropic,offline}.py``.
"""
