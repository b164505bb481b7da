"""When a log follower (the event feed, a relay) takes its next turn after a commit woke it."""

from __future__ import annotations

from adapters.read_side.event_feed import EventFeed
from adapters.read_side.follower import BACKSTOP_DELAY, LogFollower, next_turn_delay
from entrypoints.settings import Settings


def test_a_follower_woken_long_after_its_last_turn_waits_only_to_gather_a_moment() -> None:
    # Light load: the last turn began 2 s ago; the 50 ms spacing has long passed.
    assert next_turn_delay(now=102.0, last_turn=100.0, backstop_delay=0.01, batch_interval=0.05) == 0.01


def test_a_follower_woken_right_after_a_turn_keeps_the_spacing_between_turns() -> None:
    # Steady load: woken 5 ms after its last turn began, it waits out the rest of the 50 ms.
    delay = next_turn_delay(now=100.005, last_turn=100.0, backstop_delay=0.01, batch_interval=0.05)
    assert abs(delay - 0.045) < 1e-9


def test_no_spacing_means_the_gathering_moment_alone() -> None:
    assert next_turn_delay(now=100.001, last_turn=100.0, backstop_delay=0.01, batch_interval=0.0) == 0.01


def test_the_feed_is_spaced_50_ms_by_default_and_the_relays_are_not() -> None:
    assert Settings.model_fields["feed_batch_interval"].default == 0.05
    assert LogFollower.batch_interval == 0.0 and LogFollower.backstop_delay == BACKSTOP_DELAY
    feed = EventFeed("postgresql://unused", None, None, "chronicle", batch_interval=0.05)  # type: ignore[arg-type]
    assert feed.batch_interval == 0.05
    assert EventFeed("postgresql://unused", None, None, "chronicle").batch_interval == 0.0  # type: ignore[arg-type]
