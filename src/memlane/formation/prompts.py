"""Prompts of the prompted formation model (Eden memory v2's formation calls, Gaia's steering and profile).

Each step has a ``*_SYSTEM`` and a ``*_USER`` template (plain ``str.format`` templates;
literal braces are doubled) and a ``*_messages`` function turning the step's
:mod:`~memlane.formation.schemas` input into chat messages. The JSON each step must
return is the matching ``*Output`` schema, which :func:`~memlane.providers.llm.parsing.generate`
also passes to the provider as the structured-output schema.

Conversations are rendered one message per line as
``[YYYY-MM-DD HH:MM] author (role): text`` (no date when the time is unknown).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from memlane.formation.schemas import (
    MAX_FACT_WORDS,
    MAX_REFLECTION_WORDS,
    ConsolidationInput,
    DedupInput,
    ExtractionInput,
    ProfileInput,
    ReflectionInput,
    ScopeMemory,
    Turn,
)
from memlane.providers.llm.base import ChatMessage

#: What to keep when the install sets no ``extraction_instructions`` (Gaia's steering).
DEFAULT_EXTRACTION_INSTRUCTIONS = (
    "Keep only durable facts about the people in the conversation: their identity (names, roles, "
    "where they live and work), their relationships and contacts (family, friends, colleagues, with "
    "names, phone numbers, emails and addresses), their stable preferences (diet, allergies, favourite "
    "tools, places and brands) and their ongoing goals and projects. Extract nothing from a message that "
    "only describes what the assistant did (for example 'a screenshot was captured', 'task X was "
    "created', 'I sent the email'): the assistant's own actions are not memories."
)

#: The example statements each prompt shows the model (extraction's output example and its
#: do-not-extract examples, dedup's and the profile's illustrations). A weak model may hand
#: one back as if it had been said in the conversation (SmolLM2-135M returns the extraction
#: example verbatim for any chat): :func:`is_prompt_example` lets the prompted model drop
#: them. Each step is checked against its own prompt's examples only (a model can only copy
#: what it was shown). Keep these in step with the templates below (a test checks each one
#: is quoted there).
EXTRACTION_EXAMPLES: tuple[str, ...] = (
    "Alice's email is alice@example.com",
    "Alice's sister Maya lives in Lisbon",
    "her sister lives there",
    "Alice likes concise responses",
    "We are debugging the login page",
    "Bob thinks we should use React",
    "There is a bug in production right now",
    "I created the task",
    "screenshot captured",
    "I searched the web",
    "a screenshot was captured",
    "task X was created",
    "I sent the email",
)
DEDUP_EXAMPLES: tuple[str, ...] = (
    "John likes pizza",
    "John dislikes pizza",
    "Ann lives in Oslo",
    "Ann works in Bergen",
)
PROFILE_EXAMPLES: tuple[str, ...] = ("The user's name is Itay", "Follows football; supports Maccabi Haifa")
EXAMPLE_STATEMENTS: tuple[str, ...] = (*EXTRACTION_EXAMPLES, *DEDUP_EXAMPLES, *PROFILE_EXAMPLES)

_NON_WORD = re.compile(r"[\W_]+")


def normalise_statement(text: str) -> str:
    """Case-folded words only (punctuation, quotes and spacing ignored): how examples are compared."""
    return " ".join(_NON_WORD.sub(" ", text.casefold()).split())


def is_prompt_example(text: str, examples: Sequence[str] = EXAMPLE_STATEMENTS, *, said: str = "") -> bool:
    """True when ``text`` is one of ``examples`` (normalised: case, punctuation and spacing
    ignored) and the conversation ``said`` does not contain it: the model copied the prompt
    instead of reading the conversation. A person who really says the example sentence keeps it."""
    norm = normalise_statement(text)
    if not norm or norm not in {normalise_statement(e) for e in examples}:
        return False
    return not (said and f" {norm} " in f" {normalise_statement(said)} ")


# --------------------------------------------------------------------------- helpers


def format_turn(turn: Turn) -> str:
    """``[YYYY-MM-DD HH:MM] author (role): text``; continuation lines are indented."""
    text = turn.text.strip().replace("\r\n", "\n").replace("\n", "\n    ")
    line = f"{turn.author} ({turn.role}): {text}"
    return f"[{turn.at:%Y-%m-%d %H:%M}] {line}" if turn.at is not None else line


def render_conversation(turns: Sequence[Turn], *, numbered: bool = False) -> str:
    """The conversation, one message per line (see :func:`format_turn`); ``numbered`` prefixes
    ``#i`` so the model can cite the messages a fact comes from."""
    if not turns:
        return "(no messages)"
    return "\n".join(f"#{i} {format_turn(t)}" if numbered else format_turn(t) for i, t in enumerate(turns))


def _bullets(items: Sequence[str], empty: str = "(none)") -> str:
    lines = [f"- {s.strip()}" for s in items if s.strip()]
    return "\n".join(lines) if lines else empty


def _people(user_name: str | None, agent_name: str | None) -> str:
    parts = []
    if user_name:
        parts.append(f'The user (role "user") is {user_name}.')
    if agent_name:
        parts.append(f'The assistant (role "assistant") is the agent {agent_name}.')
    return " ".join(parts)


# --------------------------------------------------------------------------- 1. fact extraction

EXTRACTION_SYSTEM = """\
You extract FACTS from a conversation for the long-term memory of an AI agent.

Facts go to cold storage: the agent does not see them by default and only finds them later by \
searching. Keep a fact only if it answers a specific question someone may ask weeks from now.

A fact must be:
1. Searchable: it answers a specific question (who, what, where, when).
2. Specific: it contains names, numbers, dates or other concrete entities.
3. Enduring: likely to remain true for at least a month.
4. Cold-storage appropriate: fine to forget until someone searches for it.

Do NOT extract:
- Preferences about how the agent should behave or answer (tone, length, format, e.g. "Alice likes \
concise responses"): those become reflections, not facts.
- Current context ("We are debugging the login page"): that is session context.
- Opinions ("Bob thinks we should use React").
- Ephemeral state ("There is a bug in production right now", moods, what someone is doing today).
- Anything from a message that only describes what the assistant did ("I created the task", \
"screenshot captured", "I searched the web"), and the assistant's own suggestions unless the user \
confirms them. Both user and assistant messages are shown so you understand the context; facts come \
from what the people said or confirmed.
- Greetings, small talk, questions, hypotheticals, and anything you are unsure about.

Each fact:
- is atomic: one piece of information;
- stands alone: name people instead of using pronouns or "the user" ("Alice's sister Maya lives in \
Lisbon", not "her sister lives there");
- gives absolute dates: resolve "tomorrow", "last week" with the message timestamps;
- is at most {max_words} words;
- is written in the language of the conversation.

Scope of each fact:
{scope_rules}

Operator instructions (follow them; they say what is worth keeping here):
<instructions>
{instructions}
</instructions>

Most conversations contain few or no facts: an empty list is a good answer.
Return JSON only: {{"facts": [{{"content": "Alice's email is alice@example.com", "scope": "user", \
"sources": [3]}}]}} ("sources": the #numbers of the messages the fact comes from), or {{"facts": []}}."""

EXTRACTION_USER = """\
Conversation (one message per line: #number [date time] author (role): text; role "user" is a person, \
role "assistant" is the agent).{people}
<conversation>
{conversation}
</conversation>

Extract the facts (at most {max_words} words each) as JSON."""

_SCOPE_BOTH = """\
- "user": about this user (identity, relationships, contacts, their projects and plans).
- "agent": knowledge the agent needs in conversations with anyone (shared projects, resources, \
decisions, world facts its community relies on)."""
_SCOPE_AGENT_ONLY = """\
- This is a group conversation with several people: use scope "agent" for EVERY fact, never "user". \
Name the person each fact is about."""
_SCOPE_USER_ONLY = """\
- Use scope "user" for every fact (agent-wide facts are disabled here)."""
_SCOPE_NONE = """\
- No scope is enabled: return {"facts": []}."""


def extraction_messages(inp: ExtractionInput) -> list[ChatMessage]:
    """Messages for LLM call 1 (fact extraction)."""
    if inp.allow_user_scope and inp.allow_agent_scope:
        scope_rules = _SCOPE_BOTH
    elif inp.allow_agent_scope:
        scope_rules = _SCOPE_AGENT_ONLY
    elif inp.allow_user_scope:
        scope_rules = _SCOPE_USER_ONLY
    else:
        scope_rules = _SCOPE_NONE
    people = _people(inp.user_name, inp.agent_name)
    system = EXTRACTION_SYSTEM.format(
        max_words=MAX_FACT_WORDS,
        scope_rules=scope_rules,
        instructions=inp.instructions.strip() or DEFAULT_EXTRACTION_INSTRUCTIONS,
    )
    user = EXTRACTION_USER.format(
        people=f" {people}" if people else "",
        conversation=render_conversation(inp.conversation, numbered=True),
        max_words=MAX_FACT_WORDS,
    )
    return [ChatMessage(role="system", content=system), ChatMessage(role="user", content=user)]


# --------------------------------------------------------------------------- 2. dedup decisions

DEDUP_SYSTEM = """\
You keep an AI agent's fact memory free of duplicates and contradictions.

For each NEW fact (numbered by index) you see the most similar facts already stored, each with its \
id. Decide one event per new fact:
- ADD: the new fact is genuinely new information that no candidate already states. No fact_id.
- UPDATE: the new fact refines, extends or corrects one candidate about the same thing. Give that \
candidate's fact_id and in "text" the merged fact: one standalone fact of at most {max_words} words \
that keeps every detail still true; where the two differ, the new information wins.
- DELETE: the new fact contradicts a candidate (a reversal such as "John likes pizza" -> "John \
dislikes pizza", a changed phone number or address). Give the candidate's fact_id: the old fact is \
invalidated and the new fact is stored.
- NONE: a candidate already states the same thing (a semantic duplicate). Give its fact_id; nothing \
is stored.

Rules:
- An identical or equivalent fact is NONE, never DELETE (and never UPDATE). DELETE is only for a real \
contradiction, where both cannot be true at once.
- If one candidate is identical to the new fact and another candidate contradicts it (an old value \
stored again), DELETE the contradicted candidate: the new fact is the latest word.
- Different facts about the same person or thing are not duplicates: "Ann lives in Oslo" and "Ann \
works in Bergen" -> ADD.
- Only use a fact_id from that new fact's own candidate list. A new fact without candidates is ADD.
- Exactly one decision per index, for every index.

Return JSON only: {{"decisions": [{{"index": 0, "event": "ADD"}}, {{"index": 1, "event": "UPDATE", \
"fact_id": "<id>", "text": "<merged fact>"}}, {{"index": 2, "event": "NONE", "fact_id": "<id>"}}]}}"""

DEDUP_USER = """\
New facts and the similar stored facts:

{items}

Decide one event for each index ({indexes}) as JSON."""


def dedup_messages(inp: DedupInput) -> list[ChatMessage]:
    """Messages for the batched dedup decision."""
    blocks = []
    for item in inp.items:
        lines = [f"[{item.index}] NEW: {item.content.strip()}"]
        if item.candidates:
            lines.append("    candidates:")
            for c in item.candidates:
                how = f"similarity {c.similarity:.2f}" if c.similarity > 0 else "keyword match"
                lines.append(f"    - id={c.id} ({how}): {c.content.strip()}")
        else:
            lines.append("    candidates: none (-> ADD)")
        blocks.append("\n".join(lines))
    system = DEDUP_SYSTEM.format(max_words=MAX_FACT_WORDS)
    user = DEDUP_USER.format(
        items="\n\n".join(blocks) if blocks else "(none)",
        indexes=", ".join(str(i.index) for i in inp.items) or "none",
    )
    return [ChatMessage(role="system", content=system), ChatMessage(role="user", content=user)]


# --------------------------------------------------------------------------- 3. reflections

REFLECTION_SYSTEM = """\
You form REFLECTIONS for an AI agent: short interpreted notes that stay in the agent's context in \
every conversation and shape how it behaves. (Facts, the searchable data points, were already \
extracted from this conversation; they are listed so you do not repeat them.)

Work hierarchically, from the broadest level to the narrowest; each level records only what the \
broader levels lack:
1. agent (broadest, shared with everyone the agent talks to): projects and milestones, learnings \
about users and the community, changes in the state of the world.
2. user (only what the agent level does not capture): this user's behavioural rules and preferences \
for how the agent should act and answer, their skills, interests and goals, their personal projects.
3. session (only what neither level above captures): the high-level goal of this conversation, \
assets to pin (URLs, images, files), corrections and preferences for this session, progress made.

Rules:
- Behavioural relevance: keep what should change how the agent acts or what it keeps in mind; skip \
small talk and one-off details.
- Do not repeat what the current memory already says, nor any of the newly formed facts.
- Each reflection is one self-contained sentence of at most {max_words} words, naming people instead \
of using pronouns.
- Never invent; when nothing is worth noting at a level, leave it empty. Few good reflections beat \
many weak ones.
- Never put personal notes about one user at the agent level.
{levels}
Return JSON only: {{"agent": ["..."], "user": ["..."], "session": ["..."]}} (empty lists allowed)."""

REFLECTION_USER = """\
Current memory (already known; do not repeat):
{memory}

Facts just formed from this conversation (do not repeat them):
{facts}

Conversation (one message per line: [date time] author (role): text).{people}
<conversation>
{conversation}
</conversation>

Form the new reflections (at most {max_words} words each) as JSON."""


def _scope_memory(tag: str, mem: ScopeMemory | None) -> str:
    if mem is None:
        return f"<{tag}>(disabled: leave this level empty)</{tag}>"
    parts = []
    if mem.consolidated.strip():
        parts.append(mem.consolidated.strip())
    if any(r.strip() for r in mem.recent):
        parts.append("Recent reflections:\n" + _bullets(mem.recent))
    body = "\n".join(parts) if parts else "(empty)"
    return f"<{tag}>\n{body}\n</{tag}>"


def reflection_messages(inp: ReflectionInput) -> list[ChatMessage]:
    """Messages for LLM call 2 (hierarchical reflection extraction)."""
    levels = []
    if inp.agent is None:
        levels.append('- The agent level is disabled here: leave "agent" empty.')
    if inp.user is None:
        levels.append(
            '- The user level is disabled here (for example a group conversation): leave "user" empty; '
            "keep what matters for this conversation at the session level."
        )
    system = REFLECTION_SYSTEM.format(max_words=MAX_REFLECTION_WORDS, levels="".join(f"{x}\n" for x in levels))
    memory = "\n".join(
        [
            _scope_memory("agent_memory", inp.agent),
            _scope_memory("user_memory", inp.user),
            _scope_memory("session_memory", inp.session),
        ]
    )
    people = _people(inp.user_name, inp.agent_name)
    user = REFLECTION_USER.format(
        memory=memory,
        facts=_bullets(inp.new_facts),
        people=f" {people}" if people else "",
        conversation=render_conversation(inp.conversation),
        max_words=MAX_REFLECTION_WORDS,
    )
    return [ChatMessage(role="system", content=system), ChatMessage(role="user", content=user)]


# --------------------------------------------------------------------------- 4. consolidation

CONSOLIDATION_SYSTEM = """\
You consolidate the {scope} memory of an AI agent: merge the current memory document and the new \
reflections into one updated document.

Rules:
- The first line is exactly "VERSION: {version}" (the current version incremented).
- Keep the section structure: "[SECTION NAME]" headings, each followed by "- " bullet lines. Keep the \
existing sections and their order; add a section only when new information fits none.{new_sections}
- Resolve conflicts: when reflections contradict the current memory, the new information wins; \
reflections are listed oldest first, so later ones win over earlier ones.
- Garbage-collect: drop information that is outdated, superseded, completed or no longer relevant, \
and merge duplicates.
- At most {word_limit} words in total, header included: compress, and drop the least important \
details first.
- Never invent: every statement must come from the current memory or the reflections.

Return JSON only: {{"content": "VERSION: {version}\\n[SECTION NAME]\\n- ..."}}"""

CONSOLIDATION_USER = """\
Current {scope} memory:
<current>
{current}
</current>

New reflections (oldest first):
{reflections}

Write the whole new document: "VERSION: {version}" first, at most {word_limit} words, as JSON."""

#: Suggested sections for a first consolidation.
DEFAULT_SECTIONS = {
    "agent": "[CURRENT PROJECTS], [LEARNINGS], [WORLD STATE]",
    "user": "[PREFERENCES], [RULES], [GOALS], [SKILLS & INTERESTS]",
    "session": "[CURRENT GOAL], [PINNED ASSETS], [CORRECTIONS], [PROGRESS]",
}


def consolidation_messages(inp: ConsolidationInput) -> list[ChatMessage]:
    """Messages for the consolidation of one scope's reflections into its blob."""
    current = inp.current.strip()
    new_sections = (
        ""
        if current
        else f"\n- There is no current document yet: use sections such as {DEFAULT_SECTIONS[inp.scope]} "
        "(only those with content)."
    )
    system = CONSOLIDATION_SYSTEM.format(
        scope=inp.scope, version=inp.version, word_limit=inp.word_limit, new_sections=new_sections
    )
    user = CONSOLIDATION_USER.format(
        scope=inp.scope,
        current=current or "(empty: this is the first version)",
        reflections=_bullets(inp.reflections),
        version=inp.version,
        word_limit=inp.word_limit,
    )
    return [ChatMessage(role="system", content=system), ChatMessage(role="user", content=user)]


# --------------------------------------------------------------------------- 5. profile

PROFILE_SYSTEM = """\
You distil what an AI assistant knows about a user into a compact profile that is put at the top of \
every conversation with that user.

Rules:
- At most {limit} bullets, the most important first: rank by importance, not recency.
- Keep identity verbatim: the user's name (e.g. "The user's name is Itay") and core identity, \
relationships and contacts exactly as stored.
- Fold repetitive or related facts into one line (days of football chat -> "Follows football; \
supports Maccabi Haifa").
- When recent tasks or projects are given, use them to say what the user is working on now.
- One short line per bullet, without a leading "-" or number. Use only the information given; drop \
trivia; never invent.

Return JSON only: {{"bullets": ["...", "..."]}}"""

PROFILE_USER = """\
{who}Stored facts about the user (newest first):
{facts}

Recent tasks and projects:
{items}

Write the profile (at most {limit} bullets) as JSON."""


def profile_messages(inp: ProfileInput) -> list[ChatMessage]:
    """Messages for the session-start profile distillation."""
    system = PROFILE_SYSTEM.format(limit=inp.limit)
    user = PROFILE_USER.format(
        who=f"The user's name: {inp.user_name}\n\n" if inp.user_name else "",
        facts=_bullets(inp.facts),
        items=_bullets(inp.items),
        limit=inp.limit,
    )
    return [ChatMessage(role="system", content=system), ChatMessage(role="user", content=user)]
