"""``memlane bench locomo --qa`` / ``memlane bench longmemeval --qa``: the answer benchmark.

Retrieve with memlane, answer with ``--answer-llm`` (default: the configured ``--llm``),
judge with ``--judge-llm`` (default: the answer model) using mem0's published LoCoMo judge
prompt; print J per question category and overall, tokens and seconds per question
(see :mod:`memlane.evaluation.qa` and docs/answer-benchmark.md).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
from pathlib import Path
from typing import Any

from memlane.cli.progress import Progress
from memlane.errors import InvalidInputError, LLMError, UsageError
from memlane.providers.llm.base import LLM

__all__ = ["add_qa_options", "check_qa_options", "cmd_locomo_qa", "cmd_longmemeval_qa"]

#: Options that mean something only with ``--qa``.
_QA_ONLY = ("answer_llm", "judge_llm", "top_k", "full_context", "context_tokens")
_NOT_CHAT = ("", "offline", "offline:rules", "none", "off")


def _count(text: str) -> int:
    """An argparse type: a whole number > 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be greater than 0, got {text!r}")
    return value


_count.__name__ = "int"


def add_qa_options(p: argparse.ArgumentParser, *, limit: bool) -> None:
    """The answer-benchmark options of a ``bench`` sub-command (``limit``: add ``--limit`` too)."""
    from memlane.evaluation.qa import CONTEXT_TOKENS, TOP_K

    g = p.add_argument_group("answer benchmark (--qa)")
    g.add_argument(
        "--qa",
        action="store_true",
        help="answer each question with an LLM from the retrieved memories and grade it with a judge LLM "
        "(J per category, tokens and seconds per question)",
    )
    g.add_argument("--answer-llm", metavar="MODEL", help="model that answers (default: --llm, the configured model)")
    g.add_argument("--judge-llm", metavar="MODEL", help="model that grades the answers (default: the answer model)")
    g.add_argument("--top-k", type=_count, help=f"memories retrieved per question (default: {TOP_K})")
    g.add_argument(
        "--full-context",
        action="store_true",
        help="also run the baseline with the whole conversation in the prompt (cut to --context-tokens)",
    )
    g.add_argument(
        "--context-tokens",
        type=_count,
        help=f"the answer model's context window, for --full-context (default: {CONTEXT_TOKENS})",
    )
    if limit:
        g.add_argument("--limit", type=_count, help="only the first N questions (with --qa)")


def check_qa_options(args: argparse.Namespace, *, limit: bool = False) -> None:
    """UsageError when an answer-benchmark option (``--limit`` too, when ``limit``) is given without ``--qa``."""
    if args.qa:
        return
    names = (*_QA_ONLY, "limit") if limit else _QA_ONLY
    given = [name for name in names if getattr(args, name, None) not in (None, False)]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise UsageError(f"{flags} only work with --qa (the answer benchmark)")


def _models(args: argparse.Namespace) -> tuple[LLM, LLM]:
    from memlane.registry import make_llm

    spec = str(args.answer_llm or args.llm or "").strip()
    if spec.lower() in _NOT_CHAT:
        raise UsageError(
            f"--qa needs a chat model to answer, got {spec or 'none'!r}: pass --answer-llm provider:model "
            "(e.g. openai:gpt-4o-mini, ollama:llama3.1) or set --llm / memory.llm / MEMLANE_LLM"
        )
    answer = make_llm(spec)
    judge = make_llm(args.judge_llm) if args.judge_llm else answer
    return answer, judge


async def _close(*llms: LLM) -> None:
    for llm in dict.fromkeys(llms):
        await llm.aclose()


def cmd_locomo_qa(args: argparse.Namespace) -> int:
    """``memlane bench locomo --qa``."""
    from memlane.evaluation import qa
    from memlane.evaluation.locomo import load
    from memlane.memory import AsyncMemory

    convs = load(args.data, args.conversations)
    total = sum(len(c.qa) for c in convs)
    if not total:
        raise InvalidInputError(f"no category 1-4 questions with answers in {args.data}")
    n = min(total, args.limit or total)
    answer, judge = _models(args)

    async def run() -> dict[str, Any]:
        try:
            async with AsyncMemory(args.bench_db or ":memory:", embedder=args.embedder, sessions="null") as m:
                with Progress(n, "answer+judge", unit="q", enabled=not args.quiet) as bar:
                    res = await qa.run_locomo(
                        m,
                        convs,
                        answer,
                        judge,
                        top_k=args.top_k or qa.TOP_K,
                        full_context=args.full_context,
                        context_tokens=args.context_tokens or qa.CONTEXT_TOKENS,
                        limit=args.limit,
                        progress=bar.update,
                    )
                embedder = m.embedder.name if m.embedder else None
        finally:
            await _close(answer, judge)
        return _summary(args, "locomo", res, answer, judge, embedder)

    return _print(args, asyncio.run(run()))


def cmd_longmemeval_qa(args: argparse.Namespace) -> int:
    """``memlane bench longmemeval --qa``."""
    from memlane.evaluation import qa
    from memlane.evaluation.longmemeval import load
    from memlane.memory import AsyncMemory

    questions = load(args.data, roles=args.roles, limit=args.limit)
    if not questions:
        raise InvalidInputError(f"no questions in {args.data}")
    answer, judge = _models(args)

    async def run() -> dict[str, Any]:
        try:
            async with AsyncMemory(args.bench_db or ":memory:", embedder=args.embedder, sessions="null") as m:
                with Progress(len(questions), "answer+judge", unit="q", enabled=not args.quiet) as bar:
                    res = await qa.run_longmemeval(
                        m,
                        questions,
                        answer,
                        judge,
                        top_k=args.top_k or qa.TOP_K,
                        full_context=args.full_context,
                        context_tokens=args.context_tokens or qa.CONTEXT_TOKENS,
                        progress=bar.update,
                    )
                embedder = m.embedder.name if m.embedder else None
        finally:
            await _close(answer, judge)
        return _summary(args, "longmemeval", res, answer, judge, embedder)

    return _print(args, asyncio.run(run()))


def _summary(
    args: argparse.Namespace, bench: str, res: Any, answer: LLM, judge: LLM, embedder: str | None
) -> dict[str, Any]:
    from memlane.evaluation import qa

    note = (
        "category 5 (adversarial) excluded, as mem0's protocol does"
        if bench == "locomo"
        else f"{res.skipped} abstention questions skipped; judged with mem0's LoCoMo prompt, not LongMemEval's own"
    )
    return {
        "benchmark": bench,
        "data": str(args.data),
        "answer_llm": answer.name,
        "judge_llm": judge.name,
        "embedder": embedder,
        "top_k": args.top_k or qa.TOP_K,
        "context_tokens": args.context_tokens or qa.CONTEXT_TOKENS,
        "turns": res.turns,
        "ingest_s": round(res.ingest_s, 2),
        "skipped": res.skipped,
        "note": note,
        "error": res.error,
        "results": [r.as_dict() for r in res.reports],
    }


def _fmt(x: float) -> str:
    return f"{x:.3f}" if math.isfinite(x) else "-"


def _print(args: argparse.Namespace, out: dict[str, Any]) -> int:
    """Print the figures (also those of a run that stopped early: then exit 2 with the reason)."""
    _show(args, out)
    if out["error"]:
        raise LLMError(f"{out['error']} (the figures above are of the questions graded before it)")
    return 0


def _show(args: argparse.Namespace, out: dict[str, Any]) -> None:
    if args.json:
        print(json.dumps(out, indent=2, ensure_ascii=False))
        return
    name = "LoCoMo" if out["benchmark"] == "locomo" else "LongMemEval"
    print(
        f"{name} J {Path(out['data']).name}: answer {out['answer_llm']}, judge {out['judge_llm']}, "
        f"top_k {out['top_k']}, embedder {out['embedder']}"
    )
    print(f"ingest: {out['turns']} turns in {out['ingest_s']} s; {out['note']}")
    for r in out["results"]:
        cut = f" ({r['truncated']} of {r['questions']} cut to {out['context_tokens']} tokens)" if r["truncated"] else ""
        print(f"\n== {r['mode']}{cut}")
        print(f"{'category':<28} {'n':>4} {'J':>6}")
        for cat, row in r["by_category"].items():
            print(f"{cat:<28} {row['questions']:>4} {_fmt(row['J']):>6}")
        print(f"{'overall':<28} {r['questions']:>4} {_fmt(r['J']):>6}")
        tok, sec = r["tokens_per_question"], r["seconds_per_question"]
        print(
            f"tokens/question: answer {tok['answer']['prompt']} prompt + {tok['answer']['completion']} completion, "
            f"judge {tok['judge']['prompt']} + {tok['judge']['completion']}"
        )
        print(f"seconds/question: retrieve {sec['retrieve']}, answer {sec['answer']}, judge {sec['judge']}")
        if r["labels_unparsed"]:
            print(f"judge replies without a CORRECT/WRONG label (counted WRONG): {r['labels_unparsed']}")
