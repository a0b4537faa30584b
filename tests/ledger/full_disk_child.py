"""Run by tests/ledger/test_full_disk.py in a mount namespace of its own, on a small tmpfs it fills up.

``python -m tests.ledger.full_disk_child DIR``: a ledger in ``DIR`` (the small file system), pins saved,
the disk filled with a file, two forgets (refused: the disk is full), the file removed, then forgets and
a save again. Prints one JSON object: each step's outcome ("ok" or the error's class and message).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from ledger import open_ledger


def outcome(fn: object) -> str:
    try:
        fn()  # type: ignore[operator]
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return "ok"


def fill(path: Path) -> None:
    """Write ``path`` until the file system refuses (ENOSPC)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 65536)
    except OSError:
        pass
    try:
        while True:
            os.write(fd, b"\0" * 512)
    except OSError:
        pass
    os.close(fd)


def main(directory: Path) -> None:
    led = open_ledger(f"sqlite:///{directory / 'ledger.db'}")
    ids = [led.save(f"pin number {n} about the garden shed " + "and more words " * 20).id for n in range(40)]
    filler = directory / "filler"
    fill(filler)
    steps = {"full": [outcome(lambda rid=rid: led.delete(rid)) for rid in ids[:2]]}
    filler.unlink()
    steps["freed"] = [outcome(lambda rid=rid: led.delete(rid)) for rid in ids[:4]]
    steps["save"] = [outcome(lambda: led.save("a pin after the disk was freed"))]
    steps["bodies"] = [str(led.get(rid).body) for rid in ids[:4]]
    led.close()
    print(json.dumps(steps))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
