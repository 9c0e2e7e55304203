"""Memory formation with the offline model: a live session becomes facts, reflections,
a consolidated blob and a profile. No API key, no network.

Run: .venv/bin/python examples/formation.py
Swap in a real model with e.g. Memory(..., llm="openai:gpt-4o-mini") and OPENAI_API_KEY set.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from memlane import Event, EventType, FormationConfig, Memory

TURNS = [
    ("user", "Hi, I'm Ana. I live in Lisbon and I work as a nurse."),
    ("assistant", "Nice to meet you, Ana! How can I help?"),
    ("user", "I'm planning a trip to Japan in October. My husband Rui is coming too."),
    ("assistant", "Lovely. Any dietary needs for restaurant tips?"),
    ("user", "I'm allergic to shellfish. Please keep answers short."),
    ("assistant", "Got it: no shellfish, short answers."),
]

with tempfile.TemporaryDirectory() as tmp:
    # Small trigger interval so this short chat forms on its own; the defaults are Eden's (45 / 1500).
    config = FormationConfig(message_interval=6, background=False, idle_minutes=None)
    with Memory(Path(tmp) / "demo.db", embedder="hash", llm="offline", formation=config) as m:
        m.sessions.create_session(user_ids=["ana"], session_id="ana:cli")
        for role, text in TURNS:
            kind = EventType.USER_MESSAGE if role == "user" else EventType.AGENT_RESPONSE
            m.add_event("ana:cli", Event(type=kind, author="Ana" if role == "user" else "gaia", content=text))
        print("queued by the trigger:", [j.payload["reason"] for j in m.list_jobs()])
        m.run_jobs()  # a long-running app leaves this to the background worker

        print("\nfacts:")
        for f in m.list(user_id="ana").items:
            print("  -", f.content)

        result = m.end_session("ana:cli")  # final formation + consolidation of every scope
        blob = m.consolidated("session", user_id="ana", session_id="ana:cli")
        print("\nsession memory:\n" + (blob.consolidated_content if blob else "(none)"))

        print("\nprofile at the next session start:\n" + (m.profile("ana") or "(none)"))

        changed = m.add("I moved to Porto last month", user_id="ana", infer=True)
        print("\nadd(infer=True):", [f.content for f in changed])
        print("history of that fact:", [h.event for h in m.history(changed[0].id, user_id="ana")] if changed else [])
        print("\nstats:", m.get_consolidation_status(user_id="ana", session_id="ana:cli"))
