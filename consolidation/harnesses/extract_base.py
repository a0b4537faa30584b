"""What every extraction harness takes and gives back.

An extraction harness makes the one hidden call of an extraction run: it receives the
session's digest and up to 20 already-pinned bodies, and returns the answer
(``{"proposals": [...]}``, or ``None`` when the text did not parse) with the tokens
and spend the call observed, as a :class:`~consolidation.harnesses.base.HarnessResult`.
A failed call raises :class:`~consolidation.errors.HarnessError`. It never
touches the ledger; the extraction gate judges the answer. Every harness does both jobs: the
registry (:data:`consolidation.harnesses.HARNESSES`, with :func:`~consolidation.harnesses.get_extractor`)
is one for both.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

from consolidation.extraction.digest import DigestMessage
from consolidation.extraction.prompt import turn as extraction_turn
from consolidation.harnesses.base import HarnessResult
from consolidation.harnesses.one_turn import OneTurnHarness


class Extractor(ABC):
    """One way to make the extraction call. Implementations are thread-safe."""

    name: str

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


class OneTurnExtractor(Extractor):
    """Extraction as one hidden, tool-less turn sent through a paying harness's :meth:`~OneTurnHarness.ask`.

    The same request discipline as the harness's consolidation call: the extraction system
    text and exactly one user message (:func:`consolidation.extraction.prompt.build_user_message`),
    the output bounded, retries only where nothing was processed, all inside the wall-clock
    cap, no repair turn. It is named as its harness (``anthropic``, ``openai``).
    """

    def __init__(self, transport: OneTurnHarness) -> None:
        self._transport = transport
        self.name = transport.name

    def extract(
        self,
        digest: Sequence[DigestMessage],
        pinned: Sequence[str],
        *,
        model: str,
        max_output_tokens: int,
        wall_clock_cap_s: float,
    ) -> HarnessResult:
        """Make the one request; a response always returns a result (``answer`` None if it did not parse).

        Raises:
            HarnessError, ValueError: as the transport's :meth:`~OneTurnHarness.ask`.
        """
        return self._transport.ask(
            extraction_turn(digest, pinned),
            model=model,
            max_output_tokens=max_output_tokens,
            wall_clock_cap_s=wall_clock_cap_s,
        )
