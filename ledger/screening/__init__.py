"""Body screening: what a record body must look like before any write path stores it.

:func:`screen_body` is called by every write path (save, propose, slash commands,
consolidation). It returns the body to store, stripped of leading and trailing
whitespace, or raises :class:`~ledger.errors.BodyRejected` with a ``why`` of
``not_text``, ``empty``, ``too_long`` or ``credential``. :func:`find_credential` gives
the credential verdict alone.

The layers live in :mod:`ledger.screening.screen` and its parts, and load with the first
body screened: a command that only reads never pays for them.
"""

from __future__ import annotations

from typing import Final

__all__ = ["MAX_BODY_CHARS", "find_credential", "screen_body"]

MAX_BODY_CHARS: Final = 2000


def screen_body(body: object, *, max_chars: int = MAX_BODY_CHARS) -> str:
    """Return the body to store (leading/trailing whitespace stripped), or raise BodyRejected.

    See :func:`ledger.screening.screen.screen_body`.
    """
    from ledger.screening.screen import screen_body as screen

    return screen(body, max_chars=max_chars)


def find_credential(text: str) -> str | None:
    """Return the kind of credential ``text`` holds (e.g. ``"Anthropic API key"``), or None.

    The kind never contains the secret. See :func:`ledger.screening.screen.find_credential`.
    """
    from ledger.screening.screen import find_credential as find

    return find(text)
