"""A deterministic feature-hashing embedder: no model, no network, pure numpy.

For tests and for machines without the local model. It captures word overlap, not meaning:
texts that share words (or word pieces, through character trigrams) come out close.

Features of a lower-cased text split into unicode ``\\w+`` words:

* each word (weight 1.0),
* each pair of neighbouring words (weight 0.5),
* each character trigram of ``<word>`` (with boundary marks; weight 0.3),

each hashed into one of ``dim`` buckets with a sign taken from the same hash (signed hashing,
so collisions cancel out on average instead of piling up). Words and trigrams are hashed
with BLAKE2b, which, unlike ``hash()``, gives the same value in every process; a bigram's
hash is a splitmix64 mix of its two word hashes. Rows are then L2-normalised; a text without
words gives the zero vector.

Speed: the per-word features are computed once per distinct word and kept in flat numpy
arrays (a vocabulary cache), so embedding is a dictionary lookup per word plus a few
vectorised numpy passes per chunk of texts.
"""

from __future__ import annotations

import asyncio
import hashlib
import re
import threading
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from memlane.errors import ConfigError, InvalidInputError
from memlane.providers.embed.base import Matrix, normalize

UNIGRAM_WEIGHT = 1.0
BIGRAM_WEIGHT = 0.5
TRIGRAM_WEIGHT = 0.3

_WORD = re.compile(r"\w+")
_VOCAB_LIMIT = 1 << 20  # distinct words cached before the cache is reset
_CHUNK = 4096  # texts per numpy pass (bounds the temporary (chunk, dim) float64 matrix)
_BIGRAM_MULT = np.uint64(0x9E3779B97F4A7C15)
_BIGRAM_SALT = np.uint64(0x632BE59BD9B4E019)

I64 = npt.NDArray[np.int64]
F64 = npt.NDArray[np.float64]
U64 = npt.NDArray[np.uint64]


def _hash64(feature: str) -> int:
    """Stable 64-bit hash of a feature string (BLAKE2b, the same in every process)."""
    return int.from_bytes(hashlib.blake2b(feature.encode("utf-8"), digest_size=8).digest(), "little")


def _mix64(x: U64) -> U64:
    """splitmix64 finaliser (uint64 array arithmetic wraps silently, as wanted)."""
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


class HashEmbedder:
    """Feature-hashing embedder; ``name`` is ``"hash:<dim>"``.

    Deterministic: the same text gives the same vector in every instance and process.

    Args:
        dim: number of hash buckets = vector size.
    """

    def __init__(self, dim: int = 256) -> None:
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ConfigError(f"HashEmbedder dim must be a positive integer, got {dim!r}")
        self.dim = dim
        self.name = f"hash:{dim}"
        self._lock = threading.Lock()
        self._reset_vocab()

    def __repr__(self) -> str:
        return f"HashEmbedder(dim={self.dim})"

    def _reset_vocab(self) -> None:
        # word -> id; word id -> its unigram+trigram features (buckets, signed weights,
        # collisions merged) stored CSR-style in flat arrays, plus its 64-bit hash.
        self._vocab: dict[str, int] = {}
        self._feat_bucket: I64 = np.zeros(0, dtype=np.int64)
        self._feat_weight: F64 = np.zeros(0, dtype=np.float64)
        self._word_start: I64 = np.zeros(0, dtype=np.int64)
        self._word_len: I64 = np.zeros(0, dtype=np.int64)
        self._word_hash: U64 = np.zeros(0, dtype=np.uint64)

    def _add_words(self, words: list[str]) -> None:
        """Compute and store the features of words not yet in the vocabulary."""
        dim = self.dim
        buckets: list[int] = []
        weights: list[float] = []
        starts: list[int] = []
        lengths: list[int] = []
        hashes: list[int] = []
        offset = len(self._feat_bucket)
        for word in words:
            if word in self._vocab:
                continue
            h_word = _hash64("w\x00" + word)
            acc: dict[int, float] = {h_word % dim: UNIGRAM_WEIGHT if h_word >> 63 else -UNIGRAM_WEIGHT}
            marked = f"<{word}>"
            for i in range(len(marked) - 2):
                h = _hash64("c\x00" + marked[i : i + 3])
                b = h % dim
                acc[b] = acc.get(b, 0.0) + (TRIGRAM_WEIGHT if h >> 63 else -TRIGRAM_WEIGHT)
            self._vocab[word] = len(self._vocab)
            starts.append(offset + len(buckets))
            lengths.append(len(acc))
            buckets.extend(acc)
            weights.extend(acc.values())
            hashes.append(h_word)
        if not starts:
            return
        self._feat_bucket = np.concatenate([self._feat_bucket, np.asarray(buckets, dtype=np.int64)])
        self._feat_weight = np.concatenate([self._feat_weight, np.asarray(weights, dtype=np.float64)])
        self._word_start = np.concatenate([self._word_start, np.asarray(starts, dtype=np.int64)])
        self._word_len = np.concatenate([self._word_len, np.asarray(lengths, dtype=np.int64)])
        self._word_hash = np.concatenate([self._word_hash, np.asarray(hashes, dtype=np.uint64)])

    def _embed_chunk(self, texts: list[str]) -> Matrix:
        if len(self._vocab) > _VOCAB_LIMIT:
            self._reset_vocab()
        words_per_text: list[int] = []
        all_words: list[str] = []
        for text in texts:
            if not isinstance(text, str):
                raise InvalidInputError(f"HashEmbedder can only embed str, got {type(text).__name__}")
            words = _WORD.findall(text.lower())
            all_words.extend(words)
            words_per_text.append(len(words))
        ids: Sequence[int | None] = list(map(self._vocab.get, all_words))
        if None in ids:
            self._add_words([w for w, i in zip(all_words, ids, strict=True) if i is None])
            ids = list(map(self._vocab.__getitem__, all_words))

        n, dim = len(texts), self.dim
        word_ids_arr = np.asarray(ids, dtype=np.int64)
        word_rows = np.repeat(np.arange(n, dtype=np.int64), words_per_text)

        # unigram + trigram features: gather each word's CSR slice
        lens = self._word_len[word_ids_arr]
        firsts = np.cumsum(lens) - lens
        pos = np.arange(int(lens.sum()), dtype=np.int64) + np.repeat(self._word_start[word_ids_arr] - firsts, lens)
        flat = np.repeat(word_rows, lens) * dim + self._feat_bucket[pos]
        weights = self._feat_weight[pos]

        # bigrams: mix the hashes of neighbouring words of the same text
        if len(ids) > 1:
            same_text = word_rows[1:] == word_rows[:-1]
            wh = self._word_hash[word_ids_arr]
            h = _mix64(wh[:-1][same_text] * _BIGRAM_MULT + wh[1:][same_text] + _BIGRAM_SALT)
            buckets = (h % np.uint64(dim)).astype(np.int64)
            signs = np.where(h >> np.uint64(63), BIGRAM_WEIGHT, -BIGRAM_WEIGHT)
            flat = np.concatenate([flat, word_rows[1:][same_text] * dim + buckets])
            weights = np.concatenate([weights, signs])

        summed = np.bincount(flat, weights=weights, minlength=n * dim)
        return normalize(summed.reshape(n, dim))

    def embed_sync(self, texts: list[str]) -> Matrix:
        """Embed ``texts`` in the calling thread; float32 ``(len(texts), dim)``, rows normalised."""
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:  # the vocabulary cache is shared between threads
            if len(texts) <= _CHUNK:
                return self._embed_chunk(list(texts))
            out = np.empty((len(texts), self.dim), dtype=np.float32)
            for i in range(0, len(texts), _CHUNK):
                out[i : i + _CHUNK] = self._embed_chunk(list(texts[i : i + _CHUNK]))
            return out

    async def embed_batch(self, texts: list[str]) -> Matrix:
        """Embed ``texts`` in a worker thread (see :meth:`embed_sync`)."""
        return await asyncio.to_thread(self.embed_sync, texts)

    async def aclose(self) -> None:
        """Nothing to release."""
