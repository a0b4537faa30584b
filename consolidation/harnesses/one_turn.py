"""The paying harnesses' common shape: each job's call is one :class:`~consolidation.harnesses.base.Turn`.

A vendor's harness implements :meth:`OneTurnHarness.ask` (its request, retries, reading
of the reply); consolidation's call sends :func:`consolidation.prompt.turn` through it, and
:class:`~consolidation.harnesses.extract_base.OneTurnExtractor` sends extraction's turn
through the same method.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence

from consolidation.harnesses.base import Harness, HarnessResult, PromptRecord, Turn
from consolidation.prompt import turn as consolidation_turn


class OneTurnHarness(Harness):
    """A harness whose call is one :class:`Turn` to a priced model; the vendor's module supplies :meth:`ask`.

    The extraction harnesses send their turn through the same :meth:`ask`
    (:class:`~consolidation.harnesses.extract_base.OneTurnExtractor`).
    """

    def call(
        self,
        records: Sequence[PromptRecord],
        *,
        model: str,
        max_output_tokens: int,
        wall_clock_cap_s: float,
    ) -> HarnessResult:
        """Send the consolidation turn for ``records``; see :meth:`ask`."""
        return self.ask(
            consolidation_turn(records),
            model=model,
            max_output_tokens=max_output_tokens,
            wall_clock_cap_s=wall_clock_cap_s,
        )

    @abstractmethod
    def ask(self, turn: Turn, *, model: str, max_output_tokens: int, wall_clock_cap_s: float) -> HarnessResult:
        """Make the one request for ``turn`` within ``wall_clock_cap_s``.

        Returns a result whenever a response arrived (``answer`` is ``None`` when its text
        did not parse). Usage and spend come from the response.

        Raises:
            HarnessError: no price for ``model`` (checked before any request), or the request failed.
            ValueError: ``max_output_tokens`` < 1, or ``wall_clock_cap_s`` not a positive finite number.
        """
