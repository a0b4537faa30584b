"""Run by tests/ledger/test_concurrency.py: ``python -m tests.ledger.close_race_child DB``.

Three threads save on one ledger while the main thread closes it again and again, each close once the
writers have saved since the last. Prints ``closes errors``; a crash of the process is what the test looks for.
"""

from __future__ import annotations

import sys
import threading

from ledger import open_ledger

CLOSES = 60


def main(database: str) -> None:
    led = open_ledger(f"sqlite:///{database}")
    led.set_budget(led.scope_key, 100_000)
    saved, stop, errors = threading.Semaphore(0), threading.Event(), []

    def write(n: int) -> None:
        i = 0
        while not stop.is_set():
            try:
                led.save(f"note {n}.{i}: the staging cluster runs in eu-west-1 and deploys go out before 3pm")
            except Exception as exc:
                errors.append(repr(exc))
            saved.release()
            i += 1

    writers = [threading.Thread(target=write, args=(n,)) for n in range(3)]
    for thread in writers:
        thread.start()
    for _ in range(CLOSES):
        for _ in range(3):
            saved.acquire(timeout=30)
        led.close()
    stop.set()
    for thread in writers:
        thread.join(30)
    led.close()
    print(CLOSES, len(errors), errors[:3])


if __name__ == "__main__":
    main(sys.argv[1])
