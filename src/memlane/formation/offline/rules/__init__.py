"""The extraction rules, in the order they run (which is the order of the facts they produce)."""

from __future__ import annotations

from memlane.formation.offline.drafts import _Rule
from memlane.formation.offline.rules.activities import _RULES as _ACTIVITIES
from memlane.formation.offline.rules.background import _RULES as _BACKGROUND
from memlane.formation.offline.rules.details import _RULES as _DETAILS
from memlane.formation.offline.rules.identity import _RULES as _IDENTITY
from memlane.formation.offline.rules.people import _RULES as _PEOPLE
from memlane.formation.offline.rules.things import _RULES as _THINGS

_RULES: tuple[_Rule, ...] = (*_IDENTITY, *_BACKGROUND, *_THINGS, *_DETAILS, *_PEOPLE, *_ACTIVITIES)
