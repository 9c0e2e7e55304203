"""Progress bars: tqdm when installed (``memlane[cli]``), else a minimal stderr counter."""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import Any


class Progress:
    """``with Progress(total, "import") as p: p.update(n)``; silent when ``enabled`` is False."""

    def __init__(self, total: int | None, desc: str, *, unit: str = "it", enabled: bool = True) -> None:
        self.total, self.desc, self.unit, self.enabled = total, desc, unit, enabled
        self.n = 0
        self._bar: Any = None
        self._last = 0.0
        if enabled:
            try:
                from tqdm import tqdm

                self._bar = tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True)
            except ImportError:  # pragma: no cover - tqdm is in the cli extra
                self._bar = None

    def update(self, n: int = 1) -> None:
        self.n += n
        if not self.enabled:
            return
        if self._bar is not None:
            self._bar.update(n)
            return
        now = time.monotonic()  # pragma: no cover
        if now - self._last > 0.5:  # pragma: no cover
            self._last = now
            sys.stderr.write(f"\r{self.desc}: {self.n}/{self.total or '?'} {self.unit}")

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, t: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.close()
        elif self.enabled:  # pragma: no cover
            sys.stderr.write("\n")
