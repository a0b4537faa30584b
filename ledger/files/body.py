"""The body of an entry: free Markdown for context and evidence notes.

The auditor decides from the front matter alone and never reads the body as the
fact (the fact is the front matter's ``fact``). The one rule memledger adds is
that the body, HTML comments included, holds no credential: a secret in a
memory file is a secret in the repository, whatever section it is in.
"""

from __future__ import annotations

from ledger.files.fields import Collector
from ledger.screening import find_credential


def check_body(raw_body: str, line: int, out: Collector) -> str:
    """Screen the body starting on file ``line`` for credentials (reported into ``out``); return it."""
    kind = find_credential(raw_body) if raw_body.strip() else None
    if kind is not None:
        msg = f"the body looks like it holds a credential ({kind})"
        out.add("body", "body-credential", msg, "remove the secret; record where it is kept instead", line=line)
    return raw_body
