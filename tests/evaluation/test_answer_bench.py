"""The answer benchmark (``bench locomo --qa`` / ``bench longmemeval --qa``): retrieve, answer,
judge, J per category.

On tiny LoCoMo- and LongMemEval-format files written here (never the CC BY-NC data): the whole
pipeline with scripted models (J computed from the judge's labels, per category; what the
answer and judge prompts hold), the CLI against a real OpenAI-compatible HTTP server on
loopback (scripted replies), and against llama.cpp serving SmolLM2 (structure only).
"""

from __future__ import annotations

import json
import re
import shlex
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from test_longmemeval import write_data as write_lme

from llama_server import LlamaServer
from loopback import JsonHandler, Reply, serve
from memlane.cli.main import build_parser, main
from memlane.errors import LLMError
from memlane.evaluation import locomo, longmemeval, qa
from memlane.memory import AsyncMemory
from memlane.providers.llm.base import ChatMessage, estimate_tokens
from memlane.testing import ScriptedLLM

CONV_A = {
    "speaker_a": "Ann",
    "speaker_b": "Ben",
    "session_1_date_time": "1:56 pm on 8 May, 2023",
    "session_1": [
        {"speaker": "Ann", "dia_id": "D1:1", "text": "I started pottery classes last week!"},
        {"speaker": "Ben", "dia_id": "D1:2", "text": "Nice, what did you make?"},
        {"speaker": "Ann", "dia_id": "D1:3", "text": "A blue bowl for my mum", "blip_caption": "a photo of a bowl"},
    ],
    "session_2_date_time": "10:00 am on 9 June, 2023",
    "session_2": [
        {"speaker": "Ben", "dia_id": "D2:1", "text": "I ran a marathon in Boston"},
        {"speaker": "Ann", "dia_id": "D2:2", "text": "Wow, how long did it take?"},
        {"speaker": "Ben", "dia_id": "D2:3", "text": "Four hours, my knees still hurt"},
    ],
}
QA_A = [
    {"question": "What did Ann make in pottery class?", "answer": "a bowl", "evidence": ["D1:3"], "category": 1},
    {"question": "Where did Ben run a marathon?", "answer": "Boston", "evidence": ["D2:1"], "category": 4},
    {"question": "When did Ann start pottery?", "answer": "May 2023", "evidence": ["D1:1"], "category": 2},
    {"question": "How long was Ben's marathon?", "answer": 4, "evidence": ["D2:3"], "category": 4},
    {"question": "What did Ben paint?", "adversarial_answer": "a sunset", "evidence": ["D1:1"], "category": 5},
]
CONV_B = {
    "speaker_a": "Cy",
    "speaker_b": "Dee",
    "session_1_date_time": "9:15 am on 2 March, 2022",
    "session_1": [
        {"speaker": "Cy", "dia_id": "D1:1", "text": "My cat Miso learned to open doors"},
        {"speaker": "Dee", "dia_id": "D1:2", "text": "Ha, I would adopt a parrot someday"},
    ],
}
QA_B = [
    {"question": "What is the name of Cy's cat?", "answer": "Miso", "evidence": ["D1:1"], "category": 4},
    {"question": "Would Dee likely own a bird?", "answer": "Yes", "evidence": [], "category": 3},
]
#: The scripted judge's verdicts (CORRECT / WRONG as JSON, a prose verdict, no verdict at all).
VERDICTS = {
    "What did Ann make in pottery class?": '{"label": "CORRECT"}',
    "Where did Ben run a marathon?": '{"label": "WRONG"}',
    "When did Ann start pottery?": "The dates match, so CORRECT",
    "How long was Ben's marathon?": '```json\n{"label": "CORRECT"}\n```',
    "What is the name of Cy's cat?": '{"label": "CORRECT"}',
    "Would Dee likely own a bird?": "I cannot tell.",
}
# by category: multi-hop 1/1, single-hop 2/3 (Boston WRONG), temporal 1/1, open-domain 0/1 (no label)


def write_locomo(path: Path) -> None:
    path.write_text(
        json.dumps(
            [
                {"sample_id": "conv-a", "conversation": CONV_A, "qa": QA_A},
                {"sample_id": "conv-b", "conversation": CONV_B, "qa": QA_B},
            ]
        )
    )


def _question_of(messages: list[ChatMessage]) -> str:
    found = re.findall(r"^ *Question: (.*)$", messages[-1]["content"], re.M)  # the last: the judge's has an example
    found += re.findall(r"# Question:\n(.*)\n", messages[-1]["content"])
    assert found, messages
    return str(found[-1]).strip()


def scripted() -> tuple[ScriptedLLM, ScriptedLLM]:
    """An answer model that echoes the question, a judge that gives :data:`VERDICTS`."""
    answer = ScriptedLLM(name="scripted:answer")
    judge = ScriptedLLM(name="scripted:judge")
    for _ in range(40):
        answer.push(lambda msgs: f"<think>hmm</think> reply to {_question_of(msgs)}")
        judge.push(lambda msgs: VERDICTS[_question_of(msgs)])
    return answer, judge


@pytest.fixture
def data(tmp_path: Path) -> Path:
    f = tmp_path / "tiny_locomo.json"
    write_locomo(f)
    return f


async def test_locomo_j_per_category_from_the_judges_labels(data: Path, tmp_path: Path) -> None:
    convs = locomo.load(data)
    assert convs[0].speakers == ("Ann", "Ben")
    assert [x.answer for x in convs[0].qa] == ["a bowl", "Boston", "May 2023", "4"]  # category 5 left out
    answer, judge = scripted()
    async with AsyncMemory(str(tmp_path / "qa.db"), embedder=None, sessions="null") as m:
        run = await qa.run_locomo(m, convs, answer, judge, top_k=3)
    (rep,) = run.reports
    assert run.turns == 8 and rep.mode == "memlane"
    d = rep.as_dict()
    assert d["questions"] == 6
    assert d["by_category"] == {
        "multi-hop": {"questions": 1, "J": 1.0},
        "open-domain": {"questions": 1, "J": 0.0},
        "single-hop": {"questions": 3, "J": round(2 / 3, 4)},
        "temporal": {"questions": 1, "J": 1.0},
    }
    assert d["J"] == round(4 / 6, 4) and d["labels_unparsed"] == 1
    rows = {r["question"]: r for r in d["per_question"]}
    assert rows["Would Dee likely own a bird?"]["label"] == "WRONG"
    assert not rows["Would Dee likely own a bird?"]["label_parsed"]
    assert rows["How long was Ben's marathon?"]["gold"] == "4"
    assert rows["Where did Ben run a marathon?"]["answer"] == "reply to Where did Ben run a marathon?"  # no <think>

    # the answer prompt is mem0's, with the retrieved turns split by speaker, with their times
    first = answer.calls[0]
    assert first["temperature"] == 0.0 and first["max_tokens"] == qa.ANSWER_MAX_TOKENS
    (msg,) = first["messages"]
    assert msg["role"] == "system" and "You are an intelligent memory assistant" in msg["content"]
    mine = msg["content"].split("Memories for user Ann:")[1].split("Memories for user Ben:")[0]
    assert "1:56 pm on 8 May, 2023: Ann: A blue bowl for my mum [shares a photo of a bowl]" in mine
    assert "Ben:" not in mine
    # the judge prompt is mem0's, with the question, gold and generated answers, asking for the label as JSON
    (jmsg,) = judge.calls[0]["messages"]
    assert jmsg["role"] == "user" and "label an answer to a question as ’CORRECT’ or ’WRONG’" in jmsg["content"]
    assert "Gold answer: a bowl\nGenerated answer: reply to What did Ann make in pottery class?" in jmsg["content"]
    assert judge.calls[0]["schema"] == qa.JUDGE_SCHEMA
    # tokens per question are the meter's (the scripted model's estimates)
    prompt = sum(estimate_tokens(c["messages"][0]["content"]) for c in answer.calls) / 6
    assert d["tokens_per_question"]["answer"]["prompt"] == round(prompt, 1)
    assert rep.meter.snapshot()["judge"]["calls"] == 6
    assert d["seconds_per_question"]["answer"] >= 0


async def test_limit_and_the_full_context_baseline(data: Path, tmp_path: Path) -> None:
    convs = locomo.load(data)
    answer, judge = scripted()
    async with AsyncMemory(str(tmp_path / "qa.db"), embedder=None, sessions="null") as m:
        run = await qa.run_locomo(m, convs, answer, judge, limit=2, full_context=True)
        assert not (await m.search("Miso cat", user_id="conv-b")).hits  # the unused conversation is not stored
    assert [r.mode for r in run.reports] == ["memlane", "full-context"] and run.turns == 6
    full = run.reports[1]
    assert [r.case.question for r in full.rows] == [x["question"] for x in QA_A[:2]]
    # mem0's full-context prompt: every turn as "time | speaker: text", nothing left out
    msgs = answer.calls[1]["messages"]
    assert msgs[0]["role"] == "system" and "Provide the shortest possible answer." in msgs[0]["content"]
    assert "10:00 am on 9 June, 2023 | Ben: Four hours, my knees still hurt" in msgs[1]["content"]
    assert "1:56 pm on 8 May, 2023 | Ann: I started pottery classes" in msgs[1]["content"]
    assert full.as_dict()["truncated"] == 0

    # a small context keeps the latest turns and says what it left out
    lines = [qa.Line(None, "Ann", f"turn number {i} " + "x" * 200) for i in range(100)]
    msgs, dropped = qa.full_context_messages("q?", lines, context_tokens=2000)
    body = msgs[1]["content"]
    assert 0 < dropped < 100 and "turn number 99 " in body and "turn number 0 " not in body
    assert f"[the {dropped} earliest of 100 turns are left out" in body
    assert len(body) < 2000 * 3


async def test_longmemeval_j_per_type_skips_abstention_and_forgets(tmp_path: Path) -> None:
    f = tmp_path / "lme.json"
    write_lme(f)
    items = json.loads(f.read_text())
    for item in items:
        item["answer"] = f"gold of {item['question_id']}"
    f.write_text(json.dumps(items))
    questions = longmemeval.load(f)
    answer = ScriptedLLM(default="an answer")
    labels = iter(['{"label": "CORRECT"}', '{"label": "WRONG"}'] * 8)
    judge = ScriptedLLM()
    judge.push(*[(lambda msgs: next(labels)) for _ in range(16)])
    async with AsyncMemory(str(tmp_path / "lme.db"), embedder=None, sessions="null") as m:
        run = await qa.run_longmemeval(m, questions, answer, judge, top_k=5, full_context=True)
        assert not (await m.search("Biscuit beagle", user_id="lme-qa:q1")).hits  # forgotten after its question
    assert run.skipped == 1 and run.turns > 0
    mem, full = run.reports
    # the judge alternates CORRECT, WRONG: memlane's rows get CORRECT, full-context's WRONG
    assert mem.as_dict()["J"] == 1.0 and full.as_dict()["J"] == 0.0
    assert set(mem.as_dict()["by_category"]) == {
        "single-session-user",
        "multi-session",
        "temporal-reasoning",
        "knowledge-update",
    }
    prompt = answer.calls[0]["messages"][0]["content"]
    assert "Memories:" in prompt and "Biscuit is a beagle" in prompt
    assert "Question: Which breed is Biscuit? (asked on 10:00 am on 30 June, 2023)" in prompt
    assert "gold of q1" in judge.calls[0]["messages"][0]["content"]
    assert "| user: Biscuit is a beagle" in answer.calls[1]["messages"][1]["content"]


def test_parse_label() -> None:
    assert qa.parse_label('{"label": "CORRECT"}') is True
    assert qa.parse_label('{"label": "wrong"}') is False
    assert qa.parse_label('<think>CORRECT? maybe WRONG</think>\n{"label": "WRONG"}') is False
    assert qa.parse_label("It is the same date: CORRECT") is True
    assert qa.parse_label("CORRECT or WRONG, hard to say") is None
    assert qa.parse_label("") is None


# --------------------------------------------------------------------------- CLI, real HTTP
class FakeOpenAI(JsonHandler):
    """An OpenAI-compatible ``/v1/chat/completions``: answers "Boston" to every question; the
    judge (a request with ``response_format``) says CORRECT when the gold answer is Boston."""

    def do_POST(self) -> None:
        body = self.read_json()
        state = self.server.state
        with state["lock"]:
            state["requests"].append(body)
            if len(state["requests"]) > state.get("fail_after", 10**6):
                self._send(Reply(400, {"error": {"message": "model exploded"}}))
                return
        text = body["messages"][-1]["content"]
        if "response_format" in body:
            gold = re.findall(r"^Gold answer: (.*)$", text, re.M)[-1]  # the first is the prompt's example
            reply = '{"label": "%s"}' % ("CORRECT" if gold == "Boston" else "WRONG")
        else:
            reply = "Boston"
        usage = {"prompt_tokens": len(text) // 4, "completion_tokens": 3, "total_tokens": len(text) // 4 + 3}
        choice = {"index": 0, "message": {"role": "assistant", "content": reply}, "finish_reason": "stop"}
        self._send(Reply(200, {"choices": [choice], "usage": usage, "model": body["model"]}))


@pytest.fixture
def fake_openai(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    state: dict[str, Any] = {"lock": threading.Lock(), "requests": []}
    with serve(FakeOpenAI, state) as url:
        monkeypatch.setenv("OPENAI_BASE_URL", f"{url}/v1")
        monkeypatch.delenv("OPENAI_API_KEY", raising=False)
        yield state


def test_cli_locomo_qa_json_and_table(
    data: Path, fake_openai: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["bench", "locomo", "--data", str(data), "--embedder", "none", "-q", "--qa"]
    code = main([*args, "--answer-llm", "openai:answerer", "--judge-llm", "openai:judge", "--top-k", "2", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0
    assert out["answer_llm"] == "openai:answerer" and out["judge_llm"] == "openai:judge" and out["top_k"] == 2
    (rep,) = out["results"]
    assert rep["questions"] == 6 and rep["J"] == round(1 / 6, 4)
    assert rep["by_category"]["single-hop"] == {"questions": 3, "J": round(1 / 3, 4)}
    assert rep["by_category"]["multi-hop"]["J"] == 0.0
    assert rep["tokens_per_question"]["answer"]["completion"] == 3.0
    assert rep["tokens_per_question"]["judge"]["prompt"] > 100
    models = [(r["model"], "response_format" in r) for r in fake_openai["requests"]]
    assert models.count(("answerer", False)) == 6 and models.count(("judge", True)) == 6
    # the answer prompt holds at most top_k memories
    first = fake_openai["requests"][0]["messages"][0]["content"]
    assert first.count(" pm on ") + first.count(" am on ") <= 2

    fake_openai["requests"].clear()
    code = main([*args, "--llm", "openai:configured", "--limit", "3", "--full-context"])
    text = capsys.readouterr().out
    assert code == 0
    assert {r["model"] for r in fake_openai["requests"]} == {"configured"}  # the configured model answers and judges
    assert "== memlane" in text and "== full-context" in text and "category 5 (adversarial) excluded" in text
    rows = [line.split() for line in text.splitlines() if line.startswith(("single-hop", "overall"))]
    assert rows == [["single-hop", "1", "1.000"], ["overall", "3", "0.333"]] * 2
    assert "tokens/question: answer" in text and "seconds/question: retrieve" in text


def test_cli_longmemeval_qa(tmp_path: Path, fake_openai: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "lme.json"
    write_lme(f)
    args = ["bench", "longmemeval", "--data", str(f), "--embedder", "none", "-q", "--qa", "--answer-llm", "openai:m"]
    code = main([*args, "--limit", "2", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["benchmark"] == "longmemeval"
    (rep,) = out["results"]
    assert rep["questions"] == 2 and rep["J"] == 0.0  # gold answers are "-"
    assert set(rep["by_category"]) == {"single-session-user", "multi-session"}


async def test_a_failed_model_call_keeps_the_questions_graded_before_it(data: Path, tmp_path: Path) -> None:
    answer, judge = scripted()
    answer.reset()
    answer.push("one", "two", LLMError("server gone", retryable=True))
    async with AsyncMemory(str(tmp_path / "qa.db"), embedder=None, sessions="null") as m:
        run = await qa.run_locomo(m, locomo.load(data), answer, judge)
    assert run.error == "stopped after 2 questions: server gone"
    assert [r.answer for r in run.reports[0].rows] == ["one", "two"]

    f = tmp_path / "lme.json"
    write_lme(f)
    failing = ScriptedLLM([LLMError("server gone", retryable=True)])
    async with AsyncMemory(str(tmp_path / "lme.db"), embedder=None, sessions="null") as m:
        run = await qa.run_longmemeval(m, longmemeval.load(f), failing)
        assert not (await m.search("Biscuit beagle", user_id="lme-qa:q1")).hits  # forgotten all the same
    assert run.error == "stopped after 0 questions: server gone" and run.turns > 0


def test_cli_prints_the_figures_of_a_run_that_stopped(
    data: Path, fake_openai: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    fake_openai["fail_after"] = 4  # two questions answered and judged, then HTTP 400
    args = ["bench", "locomo", "--data", str(data), "--embedder", "none", "-q", "--qa", "--answer-llm", "openai:m"]
    code = main([*args, "--json"])
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert code == 2 and "stopped after 2 questions" in captured.err and "model exploded" in captured.err
    assert out["results"][0]["questions"] == 2 and out["error"].startswith("stopped after 2 questions")


def test_cli_usage_errors(data: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base = ["bench", "locomo", "--data", str(data), "--embedder", "none", "-q"]
    assert main([*base, "--answer-llm", "openai:x"]) == 2
    assert "--answer-llm only work with --qa" in capsys.readouterr().err
    assert main([*base, "--limit", "2"]) == 2
    assert "--limit only work with --qa" in capsys.readouterr().err
    assert main([*base, "--qa", "--llm", "offline"]) == 2
    assert "--qa needs a chat model" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main([*base, "--qa", "--top-k", "0"])
    assert "must be greater than 0" in capsys.readouterr().err


# --------------------------------------------------------------------------- llama.cpp
def test_cli_against_llama_cpp(
    data: Path, llama_server: LlamaServer, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """SmolLM2-135M answers and judges 3 questions through the real OpenAI client: structure only."""
    monkeypatch.setenv("OPENAI_BASE_URL", llama_server.base_url)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    args = ["bench", "locomo", "--data", str(data), "--embedder", "none", "-q", "--qa", "--json", "--limit", "3"]
    model = ["--answer-llm", f"openai:{llama_server.model}", "--top-k", "4"]
    code = main([*args, *model, "--full-context", "--context-tokens", "4096"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0, llama_server.log_tail()
    assert [r["mode"] for r in out["results"]] == ["memlane", "full-context"]
    for rep in out["results"]:
        rows = rep["per_question"]
        assert rep["questions"] == len(rows) == 3
        assert rep["J"] == round(sum(r["label"] == "CORRECT" for r in rows) / 3, 4)
        assert rep["labels_unparsed"] == 0  # the judge's JSON schema was honoured
        assert all(r["label"] in ("CORRECT", "WRONG") and r["answer"] for r in rows)
        tokens = rep["tokens_per_question"]
        assert tokens["answer"]["prompt"] > 100 and tokens["judge"]["prompt"] > 100
        assert 0 < tokens["answer"]["completion"] <= qa.ANSWER_MAX_TOKENS
        assert 0 < tokens["judge"]["completion"] <= qa.JUDGE_MAX_TOKENS
        assert rep["seconds_per_question"]["answer"] > 0 and rep["seconds_per_question"]["judge"] > 0


def test_the_documented_commands_parse() -> None:
    """Every ``memlane bench`` command of docs/answer-benchmark.md takes options that exist."""
    root = Path(__file__).resolve().parents[2]
    text = (root / "docs" / "answer-benchmark.md").read_text().replace("\\\n", " ")
    commands = [line[line.index("memlane bench") :] for line in text.splitlines() if "memlane bench " in line]
    commands = [c.split(" > ")[0].rstrip("`") for c in commands if "--data" in c]
    assert len(commands) >= 5
    parser = build_parser()
    for command in commands:
        args = parser.parse_args(shlex.split(command)[1:])
        assert args.qa and args.data, command
