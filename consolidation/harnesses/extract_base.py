"""What every extraction harness takes and gives back.

An extraction harness makes the one hidden call of an extraction run: it receives the
session's digest and up to 20 already-pinned bodies, and returns the answer
(``{"proposals": [...]}``, or ``None`` when the text did not parse) with the tokens
and spend the call observed, as a :class:`~consolidation.harnesses.base.HarnessResult`.
A failed call raises :class:`~consolidation.harnesses.base.HarnessError`. It never
touches the ledger; the extraction gate judges the answer. Every harness does both jobs: the
registry (:data:`consolidation.harnesses.HARNESSES`, with :func:`~consolidation.harnesses.get_extractor`)
is one for both.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import ClassVar

from consolidation.extraction.digest import DigestMessage
from consolidation.harnesses.base import HarnessResult


class Extractor(ABC):
    """One way to make the extraction call. Implementations are thread-safe."""

    name: ClassVar[str]

    @abstractmethod
    def extract(
        self,
        digest: Sequence[DigestMessage],
        pinned: Sequence[str],
        *,
        model: str,
        max_output_tokens: int,
        wall_clock_cap_s: float,
    ) -> HarnessResult:
        """Ask for proposals from ``digest`` (``pinned`` are not to be re-proposed).

        At most one paid response per call, inside ``wall_clock_cap_s``.

        Raises:
            HarnessError: the call failed; nothing usable arrived.
        """
