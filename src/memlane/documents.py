"""Moved to :mod:`memlane.ingest.documents` (issue 19 gave the top-level modules rooms).

This name stays importable for code written before the move: it *is* the moved module
(``sys.modules`` maps both names to one module object), so every name, private ones
included, and monkeypatching keep working.
"""

import sys

from memlane.ingest import documents as _moved
from memlane.ingest.documents import *  # noqa: F403

sys.modules[__name__] = _moved
