"""memlane's Python API in one screen: sessions, long-term memory, updates and history.

Run: .venv/bin/python examples/quickstart.py   (uses $MEMLANE_DB or a temp file)
"""

from __future__ import annotations

import os
import tempfile

from memlane import Event, EventType, Memory, session_key

db = os.environ.get("MEMLANE_DB") or os.path.join(tempfile.mkdtemp(), "quickstart.db")

with Memory(db) as memory:  # embedder="auto": local MiniLM if installed, else keyword-only
    print(f"embedder: {memory.engine.embedder.name if memory.engine.embedder else 'none (keyword-only)'}")

    # Short-term: a durable session keyed like Gaia's (user:channel); a restart resumes it.
    sid = session_key("noor", "cli")
    session = memory.sessions.get_or_create_session(session_id=sid, app="concierge", user_ids=["noor"])
    for etype, author, text in [
        (EventType.USER_MESSAGE, "user", "I prefer rooms on high floors, and I'm allergic to feathers."),
        (EventType.AGENT_RESPONSE, "concierge", "Noted: high floor, hypoallergenic pillows."),
    ]:
        memory.sessions.add_event(sid, Event(type=etype, author=author, content=text), app="concierge")

    # Long-term: keep the finished session's turns (author and time kept), then recall them later.
    # (Google ADK users: memlane.adapters.adk.MemlaneMemoryService does this; see docs/adapters.md.)
    session = memory.sessions.get_session(sid, app="concierge")
    memory.add(session.events, user_id="noor", agent_id="concierge", session_id=sid)
    found = memory.search("what pillows does she need", user_id="noor", agent_id="concierge")
    print("recall ->", [(h.fact.author, h.fact.content) for h in found.hits[:2]])

    # Verbatim facts (what a `remember` tool stores), updates keep history.
    [fact] = memory.add("Noor's loyalty number is GX-4471", user_id="noor", agent_id="concierge")
    memory.update(fact.id, "Noor's loyalty number is GX-4472", user_id="noor", agent_id="concierge")
    print(
        "history ->", [(h.event, h.new_content) for h in memory.history(fact.id, user_id="noor", agent_id="concierge")]
    )

    hits = memory.search("loyalty number", user_id="noor", agent_id="concierge", debug=True)
    print("search ->", hits.hits[0].fact.content, f"({hits.debug['timings']['total_ms']:.1f} ms)")
    print("another user sees:", memory.search("loyalty number", user_id="omar", agent_id="concierge").hits)
