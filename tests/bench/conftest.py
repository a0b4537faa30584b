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
  (as :mod:`timeit` does) and returns a :class:`Sample`: wall-clock and CPU seconds
  per operation;
* :func:`report` takes the median of the per-round ratios ours/baseline (each ratio
  compares two batches timed seconds apart), for wall-clock time and for CPU time
  (which other tenants of the machine disturb less), and prints one row: the two
  medians in the target's metric, both ratios, the target (``wall <= 2x`` or
  ``cpu <= 1.2x``) and whether it is met. The session ends with all rows as one table
  (and as JSON in ``$MEMLEDGER_BENCH_JSON`` when that is set).

Other bench modules reuse these::

    from tests.bench.conftest import interleave, per_op, report

    def ours_round(r):  # -> Sample
        return per_op(lambda i: led.save(f"pin {r}.{i}"), 100)

    samples = interleave({"ours": ours_round, "raw": raw_round}, rounds=15)
    figure = report("save, per record", samples["ours"], samples["raw"], target=2.0)
    figure.check()  # after printing everything else the test measures
"""

from __future__ import annotations

import fnmatch
import gc
import json
import os
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import NamedTuple

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
    if "not bench" in (parent.config.option.markexpr or ""):
        return None  # deselected anyway (`make test`): importing it loaded its peers in every test process
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


class Sample(NamedTuple):
    """Seconds per operation: elapsed (wall clock) and CPU time of this process (user + system)."""

    wall_s: float
    cpu_s: float


def per_op(fn: Callable[[int], object], n: int) -> Sample:
    """Seconds per operation for ``fn(i)`` called for ``i in range(n)``, the collector paused."""
    with gc_paused():
        wall, cpu = time.perf_counter(), time.process_time()
        for i in range(n):
            fn(i)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return Sample(wall / n, cpu / n)


def once(fn: Callable[[], object]) -> Sample:
    """One call of ``fn``, timed like :func:`per_op`."""
    return per_op(lambda _i: fn(), 1)


def interleave(
    contenders: Mapping[str, Callable[[int], Sample]], *, rounds: int, warmup: int = 2
) -> dict[str, list[Sample]]:
    """Run every contender once per round, alternating who goes first; return each one's samples.

    ``contenders`` maps a name to ``round(r) -> Sample`` (``r`` counts
    from 0 over warm-up and measured rounds alike, so a round can use fresh data).
    Warm-up rounds are run and discarded. Samples are paired: ``samples[a][k]`` and
    ``samples[b][k]`` were measured in the same round.
    """
    names = list(contenders)
    samples: dict[str, list[Sample]] = {name: [] for name in names}
    for r in range(warmup + rounds):
        order = names if r % 2 == 0 else names[::-1]
        for name in order:
            sample = contenders[name](r)
            if r >= warmup:
                samples[name].append(sample)
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
    wall_ratio: float
    cpu_ratio: float
    metric: str = "wall"
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
                f"{self.wall_ratio:.2f}x",
                f"{self.cpu_ratio:.2f}x",
                f"{self.metric} <= {self.target:g}x",
                "yes" if self.met else "NO",
            )
        )

    def check(self) -> None:
        """Fail the benchmark unless the ratio meets the target."""
        assert self.met, (
            f"{self.name}: {self.ours_label} {_duration(self.ours_s)} vs {self.baseline_label} "
            f"{_duration(self.baseline_s)} = {self.ratio:.2f}x ({self.metric}), target <= {self.target:g}x"
        )


def report(
    name: str,
    ours: Sequence[Sample],
    baseline: Sequence[Sample],
    target: float,
    *,
    metric: str = "wall",
    ours_label: str = "memledger",
    baseline_label: str = "baseline",
) -> Figure:
    """Print one figure (medians and ratios) and record it for the session's table; returns it.

    ``metric`` (``"wall"`` or ``"cpu"``) is what the target applies to; both ratios are
    printed. With paired samples (same length, from :func:`interleave`) a ratio is the
    median of the per-round ratios, which cancels load that drifts between rounds;
    otherwise the ratio of the medians. Call :meth:`Figure.check` once everything is printed.
    """
    pick = {"wall": _wall, "cpu": _cpu}[metric]
    figure = Figure(
        name=name,
        ours_s=median([pick(s) for s in ours]),
        baseline_s=median([pick(s) for s in baseline]),
        ratio=ratio(ours, baseline, pick),
        target=target,
        rounds=len(ours),
        wall_ratio=ratio(ours, baseline, _wall),
        cpu_ratio=ratio(ours, baseline, _cpu),
        metric=metric,
        ours_label=ours_label,
        baseline_label=baseline_label,
    )
    FIGURES.append(figure)
    print(f"\n{HEADER}\n{figure.row()}")
    note(f"({ours_label} vs {baseline_label}; {metric} time, median of {len(ours)} interleaved rounds)")
    return figure


def _wall(sample: Sample) -> float:
    return sample.wall_s


def _cpu(sample: Sample) -> float:
    return sample.cpu_s


def ratio(ours: Sequence[Sample], baseline: Sequence[Sample], pick: Callable[[Sample], float]) -> float:
    """The median of the per-round ratios when the samples are paired, else the ratio of the medians."""
    if len(ours) == len(baseline):
        return median([pick(o) / max(pick(b), 1e-12) for o, b in zip(ours, baseline, strict=True)])
    return median([pick(s) for s in ours]) / max(median([pick(s) for s in baseline]), 1e-12)


def load() -> str:
    """The machine's load averages (``uptime``), printed beside figures that depend on it."""
    return subprocess.run(["uptime"], capture_output=True, text=True, check=False).stdout.strip()


def note(text: str) -> None:
    """Print an indented line under the figures (a breakdown, a plan, a count)."""
    print(f"    {text}")


def _row(cells: Sequence[str]) -> str:
    widths = (40, 10, 10, 6, 6, 12, 3)
    return "  ".join(str(c).ljust(w) for c, w in zip(cells, widths, strict=True))


HEADER = _row(("figure", "memledger", "baseline", "wall", "cpu", "target", "met"))


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


class FigureTable:
    """A module's own table of figures (text cells), printed once its benchmarks have run.

    For benchmarks whose figures are not interleaved ratios (counts, rates, latencies)::

        TABLE = FigureTable("worker benchmarks", widths=(46, 16, 16, 10, 4))
        table = TABLE.fixture()          # module-level, autouse
        TABLE.record("due -> start, p50", "16 ms", "", "<= 100 ms", True)
    """

    def __init__(self, title: str, *, widths: tuple[int, int, int, int, int]) -> None:
        self.title = title
        self.widths = widths
        self.rows: list[tuple[str, str, str, str, str]] = []

    def row(self, cells: Sequence[str]) -> str:
        return "  ".join(str(c).ljust(w) for c, w in zip(cells, self.widths, strict=True))

    def record(self, figure: str, ours: str, baseline: str = "", target: str = "", met: bool | None = None) -> None:
        """One row; ``met`` is None for a figure shown for context, without a target."""
        self.rows.append((figure, ours, baseline, target, "" if met is None else "yes" if met else "NO"))
        print(self.row(self.rows[-1]))

    def fixture(self) -> Callable[[pytest.FixtureRequest], Iterator[None]]:
        @pytest.fixture(scope="module", autouse=True)
        def table(request: pytest.FixtureRequest) -> Iterator[None]:
            yield
            capture = request.config.pluginmanager.getplugin("capturemanager")
            lines = ["", self.title, self.row(("figure", "memledger", "baseline", "target", "met"))]
            lines.append("-" * len(lines[-1]))
            lines += [self.row(r) for r in self.rows]
            with capture.global_and_fixture_disabled():
                print("\n".join(lines))

        return table
