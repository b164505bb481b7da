"""The flood brake's counting: who is benched, when, for how long, and how much it keeps."""

from __future__ import annotations

from adapters.messaging.flood_brake import Brake, FloodBrake


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def brake(threshold: int = 5, window: float = 10.0, cooldown: float = 30.0) -> tuple[FloodBrake, Clock, list[str]]:
    clock = Clock()
    flood_brake = FloodBrake(Brake(threshold, window, cooldown), clock=clock, max_users=3)
    told: list[str] = []
    flood_brake.on_bench = told.append
    return flood_brake, clock, told


def test_the_thresholds_refusal_benches_the_user_and_no_one_else() -> None:
    flood_brake, _, told = brake()
    for _ in range(4):
        flood_brake.refused("mallory")
    flood_brake.refused("alice")
    assert flood_brake.benched_for("mallory") == 0 and told == []
    flood_brake.refused("mallory")
    assert told == ["mallory"] and flood_brake.benched_for("mallory") == 30
    assert flood_brake.benched_for("alice") == 0


def test_refusals_spread_beyond_the_window_bench_nobody() -> None:
    flood_brake, clock, told = brake()
    for _ in range(20):
        flood_brake.refused("patient")
        clock.now += 2.6  # four a window at most
    assert told == [] and flood_brake.benched_for("patient") == 0


def test_the_bench_ends_with_its_cooldown_and_the_count_starts_again() -> None:
    flood_brake, clock, told = brake()
    for _ in range(5):
        flood_brake.refused("mallory")
    clock.now += 29.5
    assert flood_brake.benched_for("mallory") == 1  # (whole seconds, rounded up)
    clock.now += 0.5
    assert flood_brake.benched_for("mallory") == 0
    flood_brake.refused("mallory")
    assert told == ["mallory"], "one refusal after the cooldown is not a new flood"
    for _ in range(4):
        flood_brake.refused("mallory")
    assert told == ["mallory", "mallory"] and flood_brake.benched_users == 2


def test_a_threshold_of_zero_benches_nobody() -> None:
    flood_brake, _, told = brake(threshold=0)
    for _ in range(1000):
        flood_brake.refused("mallory")
    assert told == [] and flood_brake.benched_for("mallory") == 0


def test_counts_are_kept_for_at_most_max_users() -> None:
    """A flood of refusals under many names costs bounded memory: the least recently
    refused users' counts go first."""
    flood_brake, _, told = brake()
    for _ in range(4):
        flood_brake.refused("mallory")
    for n in range(3):
        flood_brake.refused(f"other-{n}")
    assert len(flood_brake._counts) == 3
    flood_brake.refused("mallory")  # her count was dropped: this is her first again
    assert told == []
