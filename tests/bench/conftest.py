"""Shared benchmark machinery: collection of ``bench_*.py``, interleaved timing, the figures table.

``make bench`` runs ``pytest -m bench tests/bench -s``. Pytest only collects
``test_*.py``, so :func:`pytest_collect_file` below also collects ``bench_*.py`` in
this directory; each benchmark is a test marked ``bench`` (deselected by the default
``addopts``), prints its figures first and then asserts its target, so ``make bench``
fails when a target is missed.

The machine is shared and small (2 cores), so a figure is never one timing:

* :func:`interleave` runs the contenders in rounds (ours, then the baseline, then the
  baseline first in the next round ...) after warm-up rounds, so both see the same
  machine load, caches and database growth;
* a contender's round times a batch of operations with the garbage collector off
  (as :mod:`timeit` does) and returns seconds per operation;
* :func:`report` takes the median of the per-round ratios ours/baseline (each ratio
  compares two batches timed seconds apart) and prints it beside both medians.

Other bench modules reuse these::

    from tests.bench.conftest import interleave, report

    samples = interleave({"ours": ours_round, "raw": raw_round}, rounds=15)
    figure = report("save, per record", samples["ours"], samples["raw"], target=2.0)
    figure.check()   # after printing everything else the test measures
"""

from __future__ import annotations

import fnmatch
import gc
import json
import os
import statistics
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

# Every figure reported in this session, printed again as one table at the end.
FIGURES: list[Figure] = []

# ------------------------------------------------------------------ collection


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Module | None:
    """Collect ``bench_*.py`` as test modules (unless ``python_files`` already does)."""
    if file_path.suffix != ".py" or not file_path.name.startswith("bench_"):
        return None
    if parent.session.isinitpath(file_path) or any(
        fnmatch.fnmatch(file_path.name, pattern) for pattern in parent.config.getini("python_files")
    ):
        return None  # pytest's own collector takes it (named on the command line, or matched): not twice
    module: pytest.Module = pytest.Module.from_parent(parent, path=file_path)
    return module


# ------------------------------------------------------------------ timing


@contextmanager
def gc_paused() -> Iterator[None]:
    """Keep the cyclic garbage collector out of a timed section (as :mod:`timeit` does)."""
    enabled = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def per_op(fn: Callable[[int], object], n: int) -> float:
    """Seconds per operation for ``fn(i)`` called for ``i in range(n)``, the collector paused."""
    with gc_paused():
        start = time.perf_counter()
        for i in range(n):
            fn(i)
        elapsed = time.perf_counter() - start
    return elapsed / n


def interleave(
    contenders: Mapping[str, Callable[[int], float]], *, rounds: int, warmup: int = 2
) -> dict[str, list[float]]:
    """Run every contender once per round, alternating who goes first; return each one's samples.

    ``contenders`` maps a name to ``round(r) -> seconds per operation`` (``r`` counts
    from 0 over warm-up and measured rounds alike, so a round can use fresh data).
    Warm-up rounds are run and discarded. Samples are paired: ``samples[a][k]`` and
    ``samples[b][k]`` were measured in the same round.
    """
    names = list(contenders)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for r in range(warmup + rounds):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            seconds = contenders[name](r)
            if r >= warmup:
                samples[name].append(seconds)
    return samples


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


# ------------------------------------------------------------------ figures


@dataclass(frozen=True, slots=True)
class Figure:
    """One benchmark figure: ours against a baseline, the ratio and the target it must meet."""

    name: str
    ours_s: float
    baseline_s: float
    ratio: float
    target: float
    rounds: int
    ours_label: str = "memledger"
    baseline_label: str = "baseline"

    @property
    def met(self) -> bool:
        return self.ratio <= self.target

    def row(self) -> str:
        return _row(
            (
                self.name,
                _duration(self.ours_s),
                _duration(self.baseline_s),
                f"{self.ratio:.2f}x",
                f"<= {self.target:g}x",
                "yes" if self.met else "NO",
            )
        )

    def check(self) -> None:
        """Fail the benchmark unless the ratio meets the target."""
        assert self.met, (
            f"{self.name}: {self.ours_label} {_duration(self.ours_s)} vs {self.baseline_label} "
            f"{_duration(self.baseline_s)} = {self.ratio:.2f}x, target <= {self.target:g}x"
        )


def report(
    name: str,
    ours: Sequence[float],
    baseline: Sequence[float],
    target: float,
    *,
    ours_label: str = "memledger",
    baseline_label: str = "baseline",
) -> Figure:
    """Print one figure (medians and ratio) and record it for the session's table; returns it.

    With paired samples (same length, from :func:`interleave`) the ratio is the median
    of the per-round ratios, which cancels load that drifts between rounds; otherwise
    the ratio of the medians. Call :meth:`Figure.check` once everything is printed.
    """
    if len(ours) == len(baseline):
        ratio = median([o / b for o, b in zip(ours, baseline, strict=True)])
    else:
        ratio = median(ours) / median(baseline)
    figure = Figure(
        name=name,
        ours_s=median(ours),
        baseline_s=median(baseline),
        ratio=ratio,
        target=target,
        rounds=len(ours),
        ours_label=ours_label,
        baseline_label=baseline_label,
    )
    FIGURES.append(figure)
    print(f"\n{HEADER}\n{figure.row()}\n    ({ours_label} vs {baseline_label}, median of {len(ours)} rounds)")
    return figure


def note(text: str) -> None:
    """Print an indented line under the figures (a breakdown, a plan, a count)."""
    print(f"    {text}")


def _row(cells: Sequence[str]) -> str:
    widths = (46, 11, 11, 8, 9, 3)
    return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True))


HEADER = _row(("figure", "memledger", "baseline", "ratio", "target", "met"))


def _duration(seconds: float) -> str:
    if seconds >= 1.0:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} us"


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """The session's figures as one table; also written as JSON to ``$MEMLEDGER_BENCH_JSON`` if set."""
    if not FIGURES:
        return
    terminalreporter.section("benchmark figures (median of interleaved rounds)")
    terminalreporter.write_line(HEADER)
    terminalreporter.write_line("-" * len(HEADER))
    for figure in FIGURES:
        terminalreporter.write_line(figure.row())
    out = os.environ.get("MEMLEDGER_BENCH_JSON")
    if out:
        Path(out).write_text(json.dumps([asdict(f) for f in FIGURES], indent=2) + "\n")
