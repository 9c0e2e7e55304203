"""``OfflineModel`` (``"offline"``): memory formation by rules, with no model and no network.

Every judgement a :class:`~memlane.formation.model.FormationModel` makes is answered here
by precompiled English patterns:

* **extraction** rewrites first-person statements ("I'm vegetarian", "my email is ...",
  "Grace is my girlfriend", "I'm moving to Berlin next month") into standalone third-person
  facts with a small, regular grammar (``SUBJECT RELATION VALUE``) that :meth:`decide`
  parses back;
* **dedup** compares subject, relation, value and polarity of those facts;
* **reflections**, **consolidation** and the **profile** are extractive: they select,
  attribute and order sentences and facts, and never write new claims.

It is deterministic and fast (thousands of turns per second), and it misses whatever the
patterns do not cover: see ``docs/offline.md`` for what it extracts and what it cannot do.

The package, one step per module::

    model.py        OfflineModel: the five async calls and their meter records
    extract.py      turns -> sentences -> clauses -> drafts -> facts naming the speaker
      rules/        the extraction rules, one theme per module, run in the order rules/__init__.py lists
      drafts.py     what a rule yields (_Draft), how rules are declared (_Rule), value cleaning
    claims.py       facts parsed back into subject/relation/value; the dedup decision
    reflect.py      reflections: the conversation's sentences worth remembering
    consolidate.py  consolidated memory: newest lines first, duplicates and replaced facts dropped
    profile.py      the profile: facts ranked identity, health, goals, preferences
    text.py         sentence splitting, contractions, questions and hedges, normal forms
    lexicon.py      word lists and the regex fragments built from them
"""

from memlane.formation.offline.model import OfflineModel

__all__ = ["OfflineModel"]
