"""A small labelled LongMemEval-format set whose evidence sits inside long turns (issue 22).

The official LongMemEval files cannot be downloaded here, so this script writes one of our own,
in the official format (``memlane bench longmemeval`` reads it as it reads
``longmemeval_s_cleaned.json``), to measure what windowed embeddings change::

    .venv/bin/python bench/lme_long.py            # writes bench/data/longmemeval_long_turns.json
    memlane bench longmemeval --data bench/data/longmemeval_long_turns.json --mode vector
    memlane bench longmemeval --data bench/data/longmemeval_long_turns.json --mode vector --no-embed-windows

Each of the 12 questions has 6 dated sessions of 4 turns: a short user turn, a long assistant
turn, a long user note and a short reply. The long turns (3,000-3,950 characters) are filler
prose on everyday topics; one long user note of one session (the answer session, labelled in
``answer_session_ids`` and with ``has_answer``) holds the evidence sentence, at a position
drawn uniformly from its start to its end. Each question is a paraphrase that shares no
content word with its evidence sentence (written by hand below). Built, not sampled from
real users: it measures whether the evidence is on the vector side at all, not how often real
conversations bury it.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

OUT = Path(__file__).parent / "data" / "longmemeval_long_turns.json"

#: (evidence sentence, question, answer): the question shares no content word with the evidence.
PAIRS = [
    (
        "My daughter was diagnosed with a severe peanut allergy last spring.",
        "Which nut is my kid allergic to?",
        "peanuts",
    ),
    (
        "We finally adopted a grey tabby from the shelter and named her Biscuit.",
        "What is the name of the cat I got?",
        "Biscuit",
    ),
    (
        "I started playing the cello again after fifteen years away from it.",
        "Which instrument did I pick back up?",
        "the cello",
    ),
    (
        "My landlord raised the monthly rent by two hundred dollars starting in June.",
        "How much more do I pay for my apartment now?",
        "$200 a month",
    ),
    (
        "The surgeon said my knee replacement went well and recovery takes six weeks.",
        "How long until my leg operation heals?",
        "six weeks",
    ),
    (
        "I booked flights to Lisbon for our anniversary in October.",
        "Where are we travelling to celebrate being married?",
        "Lisbon",
    ),
    ("My brother Tomas just got hired as a firefighter in Denver.", "What job did my sibling get?", "firefighter"),
    (
        "I switched to a vegan diet after watching a documentary about factory farms.",
        "Why did I stop eating animal products?",
        "a documentary",
    ),
    (
        "Our basement flooded during the storm and ruined the old piano.",
        "What got destroyed by water at home?",
        "the piano",
    ),
    ("I passed the bar exam on my second attempt.", "How many tries did the lawyer licensing test take me?", "two"),
    (
        "My grandmother turns ninety next Saturday and we are throwing a party at the lake house.",
        "When is granny's birthday celebration?",
        "next Saturday",
    ),
    ("I sold my old Honda Civic to a neighbour for four thousand dollars.", "How much did I get for my car?", "$4,000"),
]

FILLER = {
    "gardening": [
        "The tomatoes along the fence need staking before the next heat wave arrives.",
        "Compost works best when the green and brown layers stay roughly balanced.",
        "Mulching the beds in early summer keeps the soil from drying out too fast.",
        "The basil bolted again, so pinching the flower heads earlier should help.",
        "Raised beds drain well but they need watering more often in August.",
    ],
    "work": [
        "The quarterly budget review covered travel costs and the new office lease.",
        "Marketing asked for two more weeks to finish the campaign slides.",
        "We agreed to move the standup to ten thirty on Tuesdays and Thursdays.",
        "The server migration is scheduled for the first weekend of next month.",
        "Legal reviewed the vendor contract and flagged the indemnity clause.",
    ],
    "cooking": [
        "Browning the onions slowly gives the stew a much deeper flavour.",
        "A pinch of salt in the dough makes the bread taste less flat.",
        "Resting the roast for ten minutes keeps the juices in the meat.",
        "Fresh ginger and garlic go into the pan before the vegetables.",
        "The sourdough starter doubled overnight in the warm kitchen.",
    ],
    "tech": [
        "The laptop battery drains quickly when the screen brightness is at maximum.",
        "Backing up the photos to an external drive every month is a good habit.",
        "The router firmware update fixed the dropped connections upstairs.",
        "Clearing the browser cache solved the slow loading on the banking site.",
        "Two-factor authentication adds a step but protects the email account.",
    ],
}
TOPICS = list(FILLER)


def long_text(rnd: random.Random, topic: str, total: int) -> str:
    parts: list[str] = []
    while sum(len(s) + 1 for s in parts) < total:
        parts.append(rnd.choice(FILLER[topic]))
    text = " ".join(parts)[:total]
    return text[: text.rfind(". ") + 1]


def with_evidence(text: str, evidence: str, share: float) -> str:
    """``evidence`` inserted at the sentence boundary nearest ``share`` of ``text``."""
    pos = int(len(text) * share)
    cut = 0 if pos < 40 else text.rfind(". ", 0, pos) + 2
    return (text[:cut] + evidence + " " + text[cut:]).strip()


def build(seed: int = 22) -> list[dict[str, object]]:
    rnd = random.Random(seed)
    out: list[dict[str, object]] = []
    for qi, (evidence, question, answer) in enumerate(PAIRS):
        sessions, ids, dates = [], [], []
        answer_idx = rnd.randrange(6)
        share = rnd.random()
        for si in range(6):
            topic = rnd.choice(TOPICS)
            note = long_text(rnd, topic, rnd.randint(3000, 3950) - len(evidence) - 1)
            if si == answer_idx:
                note = with_evidence(note, evidence, share)
            sessions.append(
                [
                    {"role": "user", "content": f"Can you help me think about {topic} this week?"},
                    {"role": "assistant", "content": long_text(rnd, rnd.choice(TOPICS), rnd.randint(3000, 3950))},
                    {"role": "user", "content": note, **({"has_answer": True} if si == answer_idx else {})},
                    {"role": "assistant", "content": "Thanks for the details, I will keep them in mind."},
                ]
            )
            ids.append(f"q{qi:02d}_s{si}")
            dates.append(f"2023/0{1 + si}/1{si} (Mon) 10:0{si}")
        out.append(
            {
                "question_id": f"long_{qi:02d}",
                "question_type": "single-session-user",
                "question": question,
                "answer": answer,
                "question_date": "2023/08/01 (Tue) 12:00",
                "haystack_session_ids": ids,
                "haystack_dates": dates,
                "haystack_sessions": sessions,
                "answer_session_ids": [ids[answer_idx]],
                "evidence_position": round(share, 2),
            }
        )
    return out


def main() -> None:
    OUT.parent.mkdir(exist_ok=True)
    OUT.write_text(json.dumps(build(), indent=1) + "\n", encoding="utf-8")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
