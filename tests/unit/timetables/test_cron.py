"""The shared cron timetable: decoded once per schedule, and scheduling exactly as Airflow's own."""

from __future__ import annotations

import pendulum
import pytest
from airflow import plugins_manager
from airflow.serialization.decoders import decode_timetable
from airflow.serialization.encoders import encode_timetable
from airflow.timetables.base import DagRunInfo, DataInterval, TimeRestriction
from airflow.timetables.trigger import CronTriggerTimetable

from airflow_iceberg.timetables.cron import SharedCronTriggerTimetable, cron_trigger


def test_the_providers_plugin_registers_it_so_airflow_can_decode_it():
    registered = plugins_manager.get_timetables_plugins()
    assert registered["airflow_iceberg.timetables.cron.SharedCronTriggerTimetable"] is SharedCronTriggerTimetable


def test_every_decode_of_one_schedule_is_the_same_instance_and_other_schedules_are_others():
    encoded = encode_timetable(cron_trigger("0 3 * * *"))
    first, second = decode_timetable(encoded), decode_timetable(encoded)
    assert isinstance(first, SharedCronTriggerTimetable)
    assert first is second
    assert decode_timetable(encode_timetable(cron_trigger("0 4 * * *"))) is not first
    berlin = SharedCronTriggerTimetable("0 3 * * *", timezone="Europe/Berlin")
    assert decode_timetable(encode_timetable(berlin)) != first


@pytest.mark.parametrize("expression", ["@daily", "@hourly", "*/5 * * * *", "0 3 * * 1-5", "0 0 1 * *"])
@pytest.mark.parametrize("last", [None, "2026-03-29T00:30:00+00:00", "2026-11-27T23:59:00+00:00"])
def test_it_schedules_every_run_as_airflows_cron_trigger_timetable(expression, last):
    ours = decode_timetable(encode_timetable(cron_trigger(expression)))
    airflows = CronTriggerTimetable(expression, timezone="UTC")
    restriction = TimeRestriction(earliest=pendulum.datetime(2026, 1, 1, tz="UTC"), latest=None, catchup=True)
    last_run = None if last is None else DataInterval.exact(pendulum.parse(last))

    def next_run(timetable) -> DagRunInfo | None:
        return timetable.next_dagrun_info(last_automated_data_interval=last_run, restriction=restriction)

    assert next_run(ours) == next_run(airflows) is not None
    assert (ours.summary, ours.description) == (airflows.summary, airflows.description)
    assert ours.serialize() == airflows.serialize()
