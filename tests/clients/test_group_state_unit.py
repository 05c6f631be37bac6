"""``GroupState`` and ``GroupStateFunction`` without Spark: the argument errors of
``pyspark.sql.streaming.state.GroupState`` (same exception classes: Spark's ``PySparkValueError`` & co. derive from
``ValueError``, ``TypeError``, ``RuntimeError``), the clearing of the timeout on each call, the conversions of
``update``, and the schema evolution rules of a restart (:mod:`rebalancer_client.spark.schemas`)."""

from __future__ import annotations

import datetime
from decimal import Decimal

import numpy as np
import pandas as pd
import pytest

from rebalancer_client.spark.group_state import GroupState, GroupStateFunction, python_converter
from rebalancer_client.spark.schemas import check_evolution, check_format


def state(value: tuple | None = None, conf: str = "NoTimeout", wm: int = GroupState.NO_TIMESTAMP,
          now: int = 1_000, timed_out: bool = False) -> GroupState:
    return GroupState(value, batch_processing_time_ms=now, watermark_ms=wm, timeout_conf=conf,
                      has_timed_out=timed_out, watermark_present=wm != GroupState.NO_TIMESTAMP,
                      state_columns=["n", "s"])


def test_get_getoption_exists_update_remove() -> None:
    st = state()
    assert not st.exists and st.getOption is None and str(st) == "GroupState(<undefined>)"
    with pytest.raises(ValueError, match="STATE_NOT_EXISTS"):
        _ = st.get
    st.update((np.int64(3), "x"))
    assert st.exists and st.get == (3, "x") and type(st.get[0]) is int and st.getOption == (3, "x")
    st.update([pd.Timestamp("2024-01-01 10:00"), np.float64(1.5)])
    assert st.get == (datetime.datetime(2024, 1, 1, 10, 0), 1.5) and type(st.get[0]) is datetime.datetime
    st.remove()
    assert not st.exists and st.getOption is None


def test_update_refuses_none_a_non_tuple_and_a_tuple_of_another_length() -> None:
    st = state((1, "a"))
    with pytest.raises(TypeError, match="CANNOT_BE_NONE"):
        st.update(None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="NOT_EXPECTED_TYPE"):
        st.update(3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"3 values, the declared state schema 2 columns \(n, s\)"):
        st.update((1, "a", 2))
    assert st.get == (1, "a")


def test_set_timeout_duration_checks_and_counts_from_the_batch_processing_time() -> None:
    with pytest.raises(RuntimeError, match="CANNOT_WITHOUT"):
        state(conf="NoTimeout").setTimeoutDuration(10)
    with pytest.raises(RuntimeError, match="CANNOT_WITHOUT"):
        state(conf="EventTimeTimeout", wm=0).setTimeoutDuration(10)
    st = state(conf="ProcessingTimeTimeout", now=5_000)
    with pytest.raises(TypeError, match="NOT_EXPECTED_TYPE"):
        st.setTimeoutDuration("10 seconds")  # type: ignore[arg-type]
    for bad in (0, -1):
        with pytest.raises(ValueError, match="VALUE_NOT_POSITIVE"):
            st.setTimeoutDuration(bad)
    assert st.timeout_timestamp is None  # cleared at every call: nothing set yet
    st.setTimeoutDuration(250)
    assert st.timeout_timestamp == 5_250 and st.getCurrentProcessingTimeMs() == 5_000


def test_set_timeout_timestamp_checks_the_conf_the_sign_and_the_watermark() -> None:
    with pytest.raises(RuntimeError, match="CANNOT_WITHOUT"):
        state(conf="ProcessingTimeTimeout").setTimeoutTimestamp(10)
    st = state(conf="EventTimeTimeout", wm=20_000)
    for bad in (0, -5):
        with pytest.raises(ValueError, match="VALUE_NOT_POSITIVE"):
            st.setTimeoutTimestamp(bad)
    with pytest.raises(ValueError, match=r"INVALID_TIMEOUT_TIMESTAMP.*19999.*20000"):
        st.setTimeoutTimestamp(19_999)
    st.setTimeoutTimestamp(20_000)  # equal to the watermark: allowed (it times out once the watermark is beyond)
    assert st.timeout_timestamp == 20_000
    utc = datetime.datetime(2024, 1, 1, tzinfo=datetime.timezone.utc)
    st.setTimeoutTimestamp(utc)
    assert st.timeout_timestamp == int(utc.timestamp() * 1000)


def test_the_watermark_needs_an_event_time_column() -> None:
    with pytest.raises(RuntimeError, match="CANNOT_WITHOUT"):
        state().getCurrentWatermarkMs()
    assert state(wm=0).getCurrentWatermarkMs() == 0
    assert state(conf="EventTimeTimeout", wm=12_000, timed_out=True).hasTimedOut


def test_group_state_function_arguments() -> None:
    def f(key, pdfs, st):  # noqa: ANN001, ANN202
        yield from ()

    assert GroupStateFunction(f, "k string", "n long").max_rows_per_frame == 10_000
    with pytest.raises(ValueError, match="output_mode"):
        GroupStateFunction(f, "k string", "n long", output_mode="complete")
    with pytest.raises(ValueError, match="timeout_conf"):
        GroupStateFunction(f, "k string", "n long", timeout_conf="EventTime")
    with pytest.raises(ValueError, match="needs event_time"):
        GroupStateFunction(f, "k string", "n long", timeout_conf="EventTimeTimeout")
    with pytest.raises(ValueError, match="max_rows_per_frame"):
        GroupStateFunction(f, "k string", "n long", max_rows_per_frame=0)
    with pytest.raises(ValueError, match="watermark_delay_s"):
        GroupStateFunction(f, "k string", "n long", event_time="ts", watermark_delay_s=-1)
    with pytest.raises(ValueError, match="func"):
        GroupStateFunction("f", "k string", "n long")  # type: ignore[arg-type]


def test_state_values_become_the_schema_python_types() -> None:
    assert python_converter("bigint")(np.float64(2.0)) == 2 and type(python_converter("bigint")(2.0)) is int
    assert python_converter("bigint")(np.nan) is None and python_converter("string")(None) is None
    assert python_converter("double")(np.int64(3)) == 3.0 and python_converter("boolean")(np.bool_(True)) is True
    assert python_converter("timestamp")(pd.NaT) is None
    assert python_converter("timestamp")(pd.Timestamp("2024-01-02")) == datetime.datetime(2024, 1, 2)
    assert python_converter("decimal(10,2)")(1.25) == Decimal("1.25")
    assert python_converter("array<bigint>")([1, 2]) == [1, 2]


def _schema(*fields: tuple[str, str, bool]) -> dict:
    return {"type": "struct", "fields": [{"name": n, "type": t, "nullable": nl, "metadata": {}} for n, t, nl in fields]}


def test_schema_evolution_rules() -> None:
    stored = _schema(("n", "long", True), ("s", "string", True))
    check_evolution(None, stored, "state")
    check_evolution(stored, stored, "state")
    check_evolution(stored, _schema(("s", "string", True), ("n", "long", True), ("x", "double", True)), "state")
    with pytest.raises(ValueError, match=r"column 'n' of the state schema changed type: stored as bigint.*"
                                         r"declared as string"):
        check_evolution(stored, _schema(("n", "string", True), ("s", "string", True)), "state")
    with pytest.raises(ValueError, match=r"no column 's' \(string\).*renamed to 't'"):
        check_evolution(stored, _schema(("n", "long", True), ("t", "string", True)), "state")
    with pytest.raises(ValueError, match=r"output schema has no column 's'"):
        check_evolution(stored, _schema(("n", "long", True)), "output")
    with pytest.raises(ValueError, match="NOT NULL"):
        check_evolution(stored, _schema(("n", "long", True), ("s", "string", True), ("x", "long", False)), "state")
    nested = _schema(("a", {"type": "array", "elementType": "long", "containsNull": True}, True))
    with pytest.raises(ValueError, match=r"array<bigint>.*array<string>"):
        check_evolution(nested, _schema(("a", {"type": "array", "elementType": "string", "containsNull": True},
                                              True)), "state")
    check_format(None, "json")
    with pytest.raises(ValueError, match="written by a 'json' function"):
        check_format("json", "group_state")
