"""The built-in offline embedder: hashed word and character-trigram features.

Deterministic and free (no model, no network): each word adds itself and its character
trigrams (padded, so a word's start and end count) into a fixed number of dimensions by a
stable hash with a sign bit, and the sum is scaled to unit length. Texts sharing many words
or word pieces point the same way, so near-duplicates, rewordings and misspellings rank
close; it knows no synonyms (a model behind the OpenAI-compatible adapter does).
"""

from __future__ import annotations

import math
import re
import unicodedata
import zlib
from collections import Counter
from collections.abc import Sequence

from services.ports.embedder import MAX_EMBEDDED_CHARS

WORD = re.compile(r"\w+")
WORD_WEIGHT = 0.5
TRIGRAM_WEIGHT = 1.0  # word pieces weigh more than whole words: a misspelt word still shares most
MAX_REMEMBERED = 50_000  # words whose features are kept (bounded: ~40 MB at most)
# Words too common to say anything about what a text is about (English; other words count).
STOP_WORDS = frozenset(
    "a an and are as at be but by do does for from has have how i in is it its me my not of on or our so"
    " that the their them there these they this to was we were what when where which who why will with"
    " you your".split()
)


class HashedNgramEmbedder:
    name = "hashed-ngram-1"  # change it whenever what a text embeds to changes

    def __init__(self, dimensions: int = 256):
        if dimensions < 16:
            raise ValueError("dimensions must be at least 16")
        self.dimensions = dimensions
        self._words: dict[str, tuple[tuple[int, float], ...]] = {}

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return [self.embed_one(text) for text in texts]

    def embed_one(self, text: str) -> list[float]:
        vector = [0.0] * self.dimensions
        words = Counter(WORD.findall(unicodedata.normalize("NFKC", text[:MAX_EMBEDDED_CHARS]).casefold()))
        for word, count in words.items():
            for index, value in self._features_of(word):
                vector[index] += count * value
        norm = math.hypot(*vector)
        return [x / norm for x in vector] if norm else vector

    def _features_of(self, word: str) -> tuple[tuple[int, float], ...]:
        """Where a word's features go, with their signed weights: the word itself and its
        padded trigrams (none for a stop word). Remembered, as words recur."""
        found = self._words.get(word)
        if found is None:
            found = () if word in STOP_WORDS else tuple(
                self._slot(feature, weight)
                for feature, weight in [("w:" + word, WORD_WEIGHT)]
                + [(f" {word} "[start : start + 3], TRIGRAM_WEIGHT) for start in range(len(word))]
            )
            if len(self._words) < MAX_REMEMBERED:
                self._words[word] = found
        return found

    def _slot(self, feature: str, weight: float) -> tuple[int, float]:
        h = zlib.crc32(feature.encode())
        return h % self.dimensions, -weight if h >> 31 else weight
