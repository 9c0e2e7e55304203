"""Typed inputs and outputs of each formation step.

The ``*Output`` models double as the JSON schemas the LLM is asked to fill (see
``prompts.py``), so they stay small and flat. Every array in them has a ``maxItems``, every
free-text string a ``maxLength`` and every integer a ``maximum``: a server that constrains
decoding to the schema (llama.cpp, vLLM, Ollama) then has to close the JSON, where an
unbounded schema lets a small model add items forever. The bounds are in the schema only;
validation stays lenient (the prompted model trims what is over). The ``*Input`` models are what a
:class:`~memlane.formation.model.FormationModel` receives: the prompted implementation
renders them into prompts, the offline one reads them directly.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from memlane.models import UtcDatetime

#: Hard caps from Eden memory v2's prompts.
MAX_FACT_WORDS = 30
MAX_REFLECTION_WORDS = 35

#: Schema bounds (``maxItems`` / ``maxLength`` / ``maximum``) of the formation outputs.
MAX_FACTS_PER_CALL = 30
"""Facts one extraction call may return (and the dedup decisions one call may make: one per fact)."""
MAX_FACT_CHARS = 400
"""A fact (or a merged UPDATE text): 30 words, with room for long names, e-mails and URLs."""
MAX_SOURCES = 20
MAX_INDEX = 9999
MAX_ID_CHARS = 64
MAX_REFLECTIONS_PER_LEVEL = 10
MAX_REFLECTION_CHARS = 400
MAX_BLOB_CHARS = 16000
"""A consolidated blob: the agent scope's 1200 words, with room to spare."""
MAX_PROFILE_BULLETS = 200
MAX_BULLET_CHARS = 400

FactText = Annotated[str, WithJsonSchema({"type": "string", "maxLength": MAX_FACT_CHARS})]
ReflectionText = Annotated[str, WithJsonSchema({"type": "string", "maxLength": MAX_REFLECTION_CHARS})]
BulletText = Annotated[str, WithJsonSchema({"type": "string", "maxLength": MAX_BULLET_CHARS})]
FactIdText = Annotated[str, WithJsonSchema({"type": "string", "maxLength": MAX_ID_CHARS})]
BlobText = Annotated[str, WithJsonSchema({"type": "string", "maxLength": MAX_BLOB_CHARS})]
Index = Annotated[int, WithJsonSchema({"type": "integer", "minimum": 0, "maximum": MAX_INDEX})]


def word_count(text: str) -> int:
    return len(text.split())


# --------------------------------------------------------------------------- shared


class Turn(BaseModel):
    """One conversational message, as formation sees it."""

    role: Literal["user", "assistant"]
    """``user`` for people, ``assistant`` for the agent."""
    author: str
    """Display name: the speaker's name when known (``Caroline``), else ``user`` / the agent's name."""
    text: str
    at: UtcDatetime | None = None
    event_id: str | None = None


class ExistingFact(BaseModel):
    """A stored fact shown to the model as a dedup candidate."""

    id: str
    content: str
    similarity: float = 0.0
    """Cosine similarity to the new fact (0 when found by keyword only)."""


# --------------------------------------------------------------------------- 1. extraction


class ExtractionInput(BaseModel):
    conversation: list[Turn]
    instructions: str
    """Steering text (the built-in default or the install's ``extraction_instructions``)."""
    user_name: str | None = None
    """The (single) user's display name, used to make facts stand alone."""
    agent_name: str | None = None
    allow_user_scope: bool = True
    """False in group sessions: every fact must then be agent-scoped."""
    allow_agent_scope: bool = True


class ExtractedFact(BaseModel):
    model_config = ConfigDict(extra="ignore")

    content: FactText = Field(description="The fact, standalone, at most 30 words, naming people instead of pronouns.")
    scope: Literal["user", "agent"] = Field(
        default="user", description="user: about this user; agent: useful to the agent for everyone."
    )
    sources: list[Index] = Field(
        default_factory=list,
        description="0-based indexes of the messages the fact comes from (optional)",
        json_schema_extra={"maxItems": MAX_SOURCES},
    )


class UnreadTurn(BaseModel):
    """A turn of the batch the formation model could not read (the offline model reports them).

    No text: the turn is named by its position in the batch and its event id, so a job result
    never copies what the user said.
    """

    index: int
    """0-based position of the turn in the batch (the extraction input's ``conversation``)."""
    event_id: str | None = None
    role: Literal["user", "assistant"] = "user"
    reason: str
    """``"language not supported: de"`` (a sentence in another language) or ``"no pattern matched"``
    (a first-person statement none of the rules understood)."""
    language: str | None = None
    """ISO 639-1 code of the language guessed, for ``language not supported``."""


class ExtractionOutput(BaseModel):
    model_config = ConfigDict(extra="ignore")

    facts: list[ExtractedFact] = Field(default_factory=list, json_schema_extra={"maxItems": MAX_FACTS_PER_CALL})


class ExtractionReport(ExtractionOutput):
    """An extraction that also names the turns it could not read (what the offline model returns).

    A subclass, so :class:`ExtractionOutput` (the schema an LLM fills) keeps its one list field.
    """

    unread: list[UnreadTurn] = Field(default_factory=list)


# --------------------------------------------------------------------------- 2. dedup


class DedupItem(BaseModel):
    index: int
    """Position of the new fact in the batch."""
    content: str
    candidates: list[ExistingFact]
    """Similar stored facts of the same scope (at most 5, similarity >= 0.7)."""


class DedupInput(BaseModel):
    items: list[DedupItem]


class Decision(BaseModel):
    model_config = ConfigDict(extra="ignore")

    index: Index = Field(description="index of the new fact")
    event: Literal["ADD", "UPDATE", "DELETE", "NONE"]
    fact_id: FactIdText | None = Field(
        default=None, description="for UPDATE / DELETE / NONE: id of the existing fact concerned"
    )
    text: FactText | None = Field(default=None, description="for UPDATE: the merged fact text")


class DedupOutput(BaseModel):
    model_config = ConfigDict(extra="ignore")

    decisions: list[Decision] = Field(default_factory=list, json_schema_extra={"maxItems": MAX_FACTS_PER_CALL})


# --------------------------------------------------------------------------- 3. reflections


class ScopeMemory(BaseModel):
    """What a scope already holds: its consolidated blob and unabsorbed reflections."""

    consolidated: str = ""
    recent: list[str] = Field(default_factory=list)


class ReflectionInput(BaseModel):
    conversation: list[Turn]
    new_facts: list[str]
    """Facts formed from this conversation (reflections must not repeat them)."""
    agent: ScopeMemory | None = None
    """None when agent-scoped reflections are disabled."""
    user: ScopeMemory | None = None
    """None when user-scoped reflections are disabled (always in group sessions)."""
    session: ScopeMemory = Field(default_factory=ScopeMemory)
    user_name: str | None = None
    agent_name: str | None = None


class ReflectionOutput(BaseModel):
    model_config = ConfigDict(extra="ignore")

    agent: list[ReflectionText] = Field(
        default_factory=list,
        description="broadest: projects, learnings, world state",
        json_schema_extra={"maxItems": MAX_REFLECTIONS_PER_LEVEL},
    )
    user: list[ReflectionText] = Field(
        default_factory=list,
        description="only what agent level lacks: rules, goals, skills",
        json_schema_extra={"maxItems": MAX_REFLECTIONS_PER_LEVEL},
    )
    session: list[ReflectionText] = Field(
        default_factory=list,
        description="only what the above lack: goals, assets, fixes",
        json_schema_extra={"maxItems": MAX_REFLECTIONS_PER_LEVEL},
    )


# --------------------------------------------------------------------------- 4. consolidation


class ConsolidationInput(BaseModel):
    scope: Literal["agent", "user", "session"]
    current: str
    """The current blob (``VERSION: n`` header included), empty the first time."""
    version: int
    """The version the new blob must carry (current + 1)."""
    reflections: list[str]
    """Unabsorbed reflections, oldest first."""
    word_limit: int


class ConsolidationOutput(BaseModel):
    model_config = ConfigDict(extra="ignore")

    content: BlobText = Field(description="the whole new blob, starting with 'VERSION: n'")


# --------------------------------------------------------------------------- 5. profile


class ProfileInput(BaseModel):
    facts: list[str]
    """The user's stored facts (deduped), newest first."""
    items: list[str] = Field(default_factory=list)
    """Recent tasks / projects, when the app supplies them."""
    limit: int = 20
    user_name: str | None = None


class ProfileOutput(BaseModel):
    model_config = ConfigDict(extra="ignore")

    bullets: list[BulletText] = Field(
        default_factory=list, description="most important first", json_schema_extra={"maxItems": MAX_PROFILE_BULLETS}
    )
