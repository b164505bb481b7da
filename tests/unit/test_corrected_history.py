"""The corrected history's entries, rewritten in Python once opened (adapters/read_side/views/corrected_history.py)."""

from __future__ import annotations

from datetime import UTC, datetime

import orjson

from adapters.read_side.views.corrected_history import TrialState, corrected_entry, corrections

AT = datetime(2026, 11, 24, 12, 0, 0, 250_000, tzinfo=UTC)


def test_the_running_best_leaves_out_invalid_trials_and_only_changed_entries_are_rewritten() -> None:
    trials = [
        TrialState(0, 0.5, True, False, None),
        TrialState(1, 0.9, False, False, None),  # the invalid one
        TrialState(2, None, True, False, None),  # unscored
        TrialState(3, 0.7, True, True, 0.7),  # already right
    ]
    assert list(corrections(trials, "maximize", True, changed=1)) == [(0, 0.5), (1, 0.5), (2, 0.5)]
    assert list(corrections(trials, "minimize", True, changed=-1)) == [(0, 0.5), (1, 0.5), (2, 0.5), (3, 0.5)]


def test_with_no_invalid_trial_left_every_corrected_entry_goes_back_to_as_recorded() -> None:
    trials = [TrialState(0, 0.5, True, True, 0.5), TrialState(1, 0.9, True, False, None)]
    assert list(corrections(trials, "maximize", False, changed=-1)) == [(0, None)]


def test_an_entry_gains_and_loses_its_corrected_fields_and_keeps_the_rest_as_recorded() -> None:
    recorded = orjson.dumps({"trial_index": 1, "score": 0.9, "candidate": {"p": "x"}, "best_so_far": 0.9}).decode()
    invalid = corrected_entry(recorded, True, 0.5, "leaked", AT)
    assert orjson.loads(invalid) == {
        "trial_index": 1, "score": 0.9, "candidate": {"p": "x"}, "best_so_far": 0.9, "corrected_best_so_far": 0.5,
        "invalid": {"reason": "leaked", "at": "2026-11-24T12:00:00.250000+00:00"},
    }
    restored_but_corrected = corrected_entry(invalid, True, 0.9, None, None)
    assert orjson.loads(restored_but_corrected)["corrected_best_so_far"] == 0.9
    assert "invalid" not in orjson.loads(restored_but_corrected)
    assert corrected_entry(invalid, False, None, None, None) == recorded  # byte for byte: keys in their order
