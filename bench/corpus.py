"""Deterministic chat text with a Zipf-shaped vocabulary, so full-text search meets common and rare words.

Content words are drawn by rank with probability ~ 1/(rank+q)^s: the top words appear in a
quarter of a user's messages (the expensive searches), the tail in a handful (the cheap ones).
English stop words are mixed in so the text reads like chat and the search configuration has
work to do.
"""

from __future__ import annotations

import itertools
import random
from dataclasses import dataclass, field

# Real words first, in the order of how common they are meant to be.
COMMON_WORDS = (
    "order model data please help thanks issue update error customer report account deploy review"
    " request price delivery invoice team project service plan design test release payment user email"
    " meeting schedule budget contract refund shipping product feature server database query prompt"
    " answer question summary draft document file upload download access password login session token"
    " api endpoint latency cache memory storage network cluster backup restore migration schema index"
    " search result ranking score metric dashboard chart graph table column row value field format"
    " export import sync batch queue worker job task status progress complete failed retry timeout"
    " warning alert incident outage support ticket priority urgent weekly monthly quarterly annual"
    " forecast revenue cost margin growth target goal strategy roadmap milestone deadline sprint"
    " backlog story estimate risk dependency blocker owner approval feedback comment note idea"
    " proposal vendor partner client market segment campaign launch brand content article video"
    " image layout template style color font page section header footer link button form input"
    " output training evaluation dataset benchmark accuracy precision recall embedding vector agent"
    " pipeline workflow trigger event stream log trace monitor config setting option parameter"
    " version branch commit merge build artifact container image cloud region instance capacity"
).split()

STOP_WORDS = (
    "the a to and of is it for in on my you can with this that be we i are have do not what how"
    " there our your about just would could should will was"
).split()

SYLLABLES = (
    "ba ko ri zen tal mo vex lu dor qui san fe ny gra pol xe hum tri ol jas wen pri sto kal mir"
).split()

TAGS = (
    "support billing sales engineering research ops legal hr marketing product design data"
).split()

TITLE_OPENERS = ("About", "Question on", "Help with", "Notes on", "Review of", "Plan for", "Issue with")


def pseudo_words(count: int) -> list[str]:
    """`count` distinct made-up words (2-4 syllables), in a fixed order: the vocabulary's long tail."""
    real = set(COMMON_WORDS) | set(STOP_WORDS)
    found: list[str] = []
    for size in (2, 3, 4):
        for parts in itertools.product(SYLLABLES, repeat=size):
            word = "".join(parts)
            if word not in real:
                found.append(word)
                if len(found) == count:
                    return found
    raise ValueError(f"cannot make {count} pseudo-words")


@dataclass
class Corpus:
    """Draws messages, titles and tags from one seeded random generator."""

    rng: random.Random
    vocabulary_size: int = 20_000
    exponent: float = 1.1
    head_offset: int = 10  # Zipf-Mandelbrot: flattens the head so no word is in every message
    rare_rank: int = 5_000  # words ranked at least this far down count as rare
    stop_word_share: float = 0.35
    words: list[str] = field(init=False)
    cum_weights: list[float] = field(init=False)

    def __post_init__(self) -> None:
        unique_common = list(dict.fromkeys(COMMON_WORDS))
        self.words = unique_common + pseudo_words(self.vocabulary_size - len(unique_common))
        weights = (1.0 / (rank + self.head_offset) ** self.exponent for rank in range(1, len(self.words) + 1))
        self.cum_weights = list(itertools.accumulate(weights))
        self.ranks = range(len(self.words))

    @property
    def common_words(self) -> list[str]:
        """The most frequent content words: each appears in a large share of messages."""
        return self.words[:12]

    def text(self, length: int) -> tuple[str, list[str]]:
        """`length` words of chat; also returns the rare words it used."""
        ranks = self.rng.choices(self.ranks, cum_weights=self.cum_weights, k=length)
        tokens = []
        for rank in ranks:
            if self.rng.random() < self.stop_word_share:
                tokens.append(self.rng.choice(STOP_WORDS))
            tokens.append(self.words[rank])
        rare = [self.words[rank] for rank in ranks if rank >= self.rare_rank]
        return " ".join(tokens).capitalize() + ".", rare

    def message(self, role: str) -> tuple[str, list[str]]:
        """A user asks briefly; an agent answers at more length."""
        length = self.rng.randint(4, 18) if role == "user" else self.rng.randint(10, 45)
        return self.text(length)

    def title(self) -> str:
        return f"{self.rng.choice(TITLE_OPENERS)} {self.text(self.rng.randint(1, 4))[0].rstrip('.').lower()}"

    def tags(self) -> list[str]:
        return self.rng.sample(TAGS, self.rng.randint(0, 3))
