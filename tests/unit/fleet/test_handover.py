"""The hand-over's states and transitions (``fleet/handover.py``), on times the tests give: no files, no Airflow.

``tests/unit/fleet/test_dag_bundle.py`` drives the same machine through the bundle, with files; the live Airflow's
``tests/integration/test_table_list_changes.py`` watches its effect on Airflow's DAG table.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta, timezone

import pytest

from airflow_iceberg.fleet.handover import (
    RETOUCHES,
    STORE_SLACK_SECONDS,
    FollowedFile,
    Handover,
    Parse,
    ParseTiming,
    Phase,
    Wait,
    Why,
)

T0 = datetime(2026, 12, 6, 12, 0, tzinfo=timezone.utc)
CHANGE_NS = int((T0 - timedelta(seconds=30)).timestamp() * 1e9)
LIST_CHANGED = T0 - timedelta(seconds=30)
#: A parse's time-out of 100 s and a refresh of 10 s: a parse is due 110 s after its touch, one at a time.
TIMING = ParseTiming(parse_timeout=100, refresh=10, stale_threshold=10, parsing_processes=1)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def parsed(stored: float, took: float = 1.0) -> Parse:
    """A parse stored ``stored`` seconds after T0 that took ``took`` seconds."""
    return Parse.of(at(stored), took)


# --- the hand-over: SETTLED and GAINERS_FIRST -------------------------------------------------------------------


def test_settled_a_change_that_moves_no_table_lets_every_reader_be_touched_at_once():
    handover = Handover()
    assert handover.list_changed(CHANGE_NS, [], at(0)) is False
    assert handover.phase is Phase.SETTLED
    assert handover.release({}, at(1), TIMING) is None


@pytest.mark.parametrize(
    "gainers, how",
    [(["iceberg_compaction_1.py"], "grown: the new file"), (["iceberg_compaction.py"], "shrunk: the lower file")],
)
def test_settled_a_change_that_moves_tables_waits_for_the_gainers_parses_then_settles(gainers, how):
    """Both ways: a list grown past a file's worth (its tables move to the new file) and a list shrunk below one (the
    tables of the file it no longer reaches move to the lower file)."""
    handover = Handover()
    assert handover.list_changed(CHANGE_NS, gainers, at(0)) is True, how
    assert handover.phase is Phase.GAINERS_FIRST
    [gainer] = gainers
    assert handover.release({gainer: None}, at(5), TIMING) is None, "no parse stored yet"
    assert handover.release({gainer: at(-60)}, at(6), TIMING) is None, "a parse from before the change"
    step = handover.release({gainer: at(7)}, at(8), TIMING)
    assert step is not None and step.file is None and step.level == logging.DEBUG
    assert handover.phase is Phase.SETTLED and handover.change == CHANGE_NS
    assert handover.release({gainer: at(7)}, at(9), TIMING) is None, "released once"


def test_gainers_first_a_further_change_waits_for_every_gainer_and_is_the_one_the_others_read():
    handover = Handover()
    handover.list_changed(CHANGE_NS, ["iceberg_compaction_1.py"], at(0))
    later = CHANGE_NS + 20 * 10**9
    assert handover.list_changed(later, ["iceberg_compaction_2.py"], at(20)) is True
    assert handover.list_changed(later + 1, [], at(21)) is True, "no gainer of its own: still waits"
    assert handover.release({"iceberg_compaction_1.py": at(22)}, at(23), TIMING) is None, "the second gainer waits"
    step = handover.release({"iceberg_compaction_1.py": at(22), "iceberg_compaction_2.py": at(24)}, at(25), TIMING)
    assert step is not None and handover.phase is Phase.SETTLED and handover.change == later + 1


def test_gainers_first_a_gainer_not_parsed_within_a_time_out_releases_the_others_with_a_warning():
    handover = Handover()
    handover.list_changed(CHANGE_NS, ["iceberg_compaction_1.py"], at(0))
    assert handover.release({}, at(110), TIMING) is None, "a time-out and a refresh allowed"
    step = handover.release({}, at(111), TIMING)
    assert step is not None and step.level == logging.WARNING
    assert "No parse of iceberg_compaction_1.py was stored within 110 s" in step.message
    assert handover.phase is Phase.SETTLED


# --- a followed file: PARSE, STALE_THRESHOLD ----------------------------------------------------------------------


def test_a_file_touched_for_a_pause_is_let_go_once_its_parse_is_stored():
    handover = Handover()
    handover.touched({"a.py": True}, at(0))
    assert handover.follow({"a.py": [parsed(-3600)]}, at(5), TIMING) == []
    assert handover.followed["a.py"].wait is Wait.PARSE
    assert handover.follow({"a.py": [parsed(6)]}, at(7), TIMING) == []
    assert "a.py" not in handover.followed


def test_a_touch_for_a_pause_keeps_the_reason_of_a_file_already_followed_for_a_list_change():
    handover = Handover()
    handover.touched({"a.py": True}, at(0), LIST_CHANGED)
    handover.touched({"a.py": True}, at(1))
    assert handover.followed["a.py"] == FollowedFile(at(0), LIST_CHANGED, True)


def test_a_parse_that_began_before_the_list_changed_is_run_once_more_and_only_once():
    handover = Handover()
    handover.touched({"a.py": True}, at(0), LIST_CHANGED)
    [step] = handover.follow({"a.py": [parsed(2, took=40)]}, at(3), TIMING)  # began 38 s before T0
    assert (step.file, step.why, step.level) == ("a.py", Why.AGAIN, logging.INFO)
    assert handover.followed["a.py"].again and handover.followed["a.py"].touched == at(3)
    assert handover.follow({"a.py": [parsed(4, took=40)]}, at(5), TIMING) == [], "once more, not once per parse"
    assert "a.py" not in handover.followed


def test_a_parse_that_began_after_the_change_less_the_store_slack_is_not_repeated():
    handover = Handover()
    handover.touched({"a.py": True}, at(0), LIST_CHANGED)
    began_after = 30 - STORE_SLACK_SECONDS - 1  # seconds before T0 the parse began: after the change and slack
    assert handover.follow({"a.py": [parsed(1, took=began_after + 1)]}, at(2), TIMING) == []
    assert "a.py" not in handover.followed


def test_tables_taken_off_soon_after_the_last_parse_wait_for_the_stale_threshold_then_one_more_parse():
    """'gone' was parsed 2 s before the touch, within the threshold of 10 s: Airflow would keep it active."""
    handover = Handover()
    handover.touched({"a.py": True}, at(0), LIST_CHANGED)
    gone, kept = parsed(-2), parsed(1)
    assert handover.follow({"a.py": [gone, kept]}, at(2), TIMING) == []
    assert handover.followed["a.py"].wait is Wait.STALE_THRESHOLD
    assert handover.followed["a.py"].until == at(8)
    assert handover.follow({"a.py": [gone, kept]}, at(8), TIMING) == [], "not yet past it"
    [step] = handover.follow({"a.py": [gone, kept]}, at(9), TIMING)
    assert (step.file, step.why) == ("a.py", Why.ONCE_MORE)
    assert "a.py" not in handover.followed
    assert handover.follow({"a.py": [gone, kept]}, at(20), TIMING) == [], "one more parse, not one per look"


def test_tables_taken_off_long_after_the_last_parse_need_no_further_parse():
    handover = Handover()
    handover.touched({"a.py": True}, at(0), LIST_CHANGED)
    assert handover.follow({"a.py": [parsed(-3600), parsed(1)]}, at(2), TIMING) == []
    assert "a.py" not in handover.followed


def test_a_file_with_dags_whose_parse_is_not_stored_in_time_is_touched_again_then_let_go_with_advice():
    handover = Handover()
    handover.touched({"a.py": True}, at(0))
    now = 0.0
    for attempt in range(1, RETOUCHES + 1):
        assert handover.follow({}, at(now + 110), TIMING) == [], "within the time-out and a refresh"
        now += 111
        [step] = handover.follow({}, at(now), TIMING)
        assert (step.file, step.why, step.level) == ("a.py", Why.RETOUCH, logging.WARNING)
        assert f"touching it again, {attempt} of {RETOUCHES}" in step.message
        assert handover.followed["a.py"].retouches == attempt
    now += 111
    [step] = handover.follow({}, at(now), TIMING)
    assert step.file is None and "raise [dag_processor] dag_file_processor_timeout" in step.message
    assert handover.followed == {}


def test_a_file_without_dags_shows_no_parse_and_is_let_go_at_its_time_out_without_a_word():
    handover = Handover()
    handover.touched({"iceberg_table_list_check.py": False}, at(0), LIST_CHANGED)
    assert handover.follow({}, at(111), TIMING) == []
    assert handover.followed == {}


def test_files_queued_behind_other_parses_get_a_time_out_for_each_round_before_them():
    """Two files waiting, one parse at a time: two time-outs; once one is stored, one."""
    handover = Handover()
    handover.touched({"a.py": True, "b.py": True}, at(0))
    assert handover.follow({}, at(200), TIMING) == []
    [step] = handover.follow({"a.py": [parsed(201)]}, at(202), TIMING)
    assert (step.file, step.why) == ("b.py", Why.RETOUCH)
