"""Moved to :mod:`memlane.engine.search` (issue 19 gave the top-level modules rooms).

This name stays importable for code written before the move: it *is* the moved module
(``sys.modules`` maps both names to one module object), so every name, private ones
included, and monkeypatching keep working.
"""

import sys

from memlane.engine import search as _moved
from memlane.engine.search import *  # noqa: F403

sys.modules[__name__] = _moved
