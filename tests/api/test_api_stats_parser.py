"""The hot-path statistics parser accepts exactly what the documented pydantic schema accepts, with the same
values; whatever it does not handle falls back to pydantic (same 422 field paths)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from api.schemas import StatsRequest
from api.stats_parser import StatsInvalid, _fast, parse_stats
from solvers.model import MAX_MAGNITUDE

number = st.one_of(st.integers(-5, 10**6), st.floats(allow_nan=False, allow_infinity=False, width=64),
                   st.just(-0.0), st.booleans(), st.text(max_size=3), st.none())
key = st.sampled_from(["id", "load", "state_bytes", "bytes", "extra", "src", "dst", "rate"])
kg = st.one_of(
    st.fixed_dictionaries({"id": st.text(max_size=4), "load": number},
                          optional={"state_bytes": number, "bytes": number}),
    st.dictionaries(key, st.one_of(number, st.text(max_size=3)), max_size=4),
    st.integers(), st.text(max_size=2),
)
edge = st.one_of(st.fixed_dictionaries({"src": st.text(max_size=3), "dst": st.text(max_size=3), "rate": number}),
                 st.dictionaries(key, number, max_size=4))
body = st.fixed_dictionaries(
    {"batch_id": st.one_of(st.integers(-2, 10**9), st.integers(2**63 - 2, 2**63 + 1), st.floats(allow_nan=False),
                           st.text(max_size=2)),
     "epoch": st.one_of(st.integers(-1, 5), st.booleans())},
    optional={"key_groups": st.lists(kg, max_size=6), "communication": st.lists(edge, max_size=3),
              "other": st.integers()})


def _sums_fit(model: StatsRequest) -> bool:
    kgs = model.key_groups
    sums = [math.fsum(k.load for k in kgs), math.fsum(k.state_bytes or 0 for k in kgs),
            math.fsum(k.bytes or 0 for k in kgs), math.fsum(c.rate for c in model.communication)]
    return all(x <= MAX_MAGNITUDE for x in sums)


def _same(a: np.ndarray, b: list) -> bool:
    return a.shape == (len(b),) and all((math.isnan(x) and y is None) or x == y
                                        for x, y in zip(a.tolist(), b, strict=True))


@settings(max_examples=400, deadline=None)
@given(doc=body)
def test_fast_parser_agrees_with_pydantic(doc):
    raw = json.dumps(doc).encode()
    try:
        model = StatsRequest.model_validate_json(raw)
    except ValidationError:
        model = None
    fast = _fast(raw)
    if fast is not None:
        assert model is not None, "the fast path accepted a body the schema rejects"
        assert (fast.batch_id, fast.epoch) == (model.batch_id, model.epoch)
        assert fast.ids == [k.id for k in model.key_groups]
        assert fast.load.tolist() == [k.load for k in model.key_groups]
        for name in ("state_bytes", "bytes"):
            got = fast.state if name == "state_bytes" else fast.bytes
            if got is None:
                assert all(getattr(k, name) is None for k in model.key_groups)
            else:
                assert _same(got, [getattr(k, name) for k in model.key_groups])
        assert (fast.src, fast.dst) == ([c.src for c in model.communication], [c.dst for c in model.communication])
        assert fast.rate.tolist() == [c.rate for c in model.communication]
    # parse_stats (fast path + fallback) accepts iff the schema does and no sum exceeds MAX_MAGNITUDE
    try:
        parsed = parse_stats(raw)
        assert model is not None and parsed.ids == [k.id for k in model.key_groups]
    except StatsInvalid as exc:
        assert model is None or not _sums_fit(model), exc.errors
        assert exc.errors


def test_typical_body_takes_the_fast_path():
    kgs = [{"id": f"agg/{k}", "load": 1.5 * k, "state_bytes": 4096} for k in range(1000)]
    raw = json.dumps({"batch_id": 3, "epoch": 1, "key_groups": kgs,
                      "communication": [{"src": "agg/1", "dst": "agg/2", "rate": 2}]}).encode()
    fast = _fast(raw)
    assert fast is not None and len(fast.ids) == 1000 and fast.state is not None and fast.rate.tolist() == [2.0]


def _errors(body: dict) -> list:
    with pytest.raises(StatsInvalid) as info:
        parse_stats(json.dumps(body).encode())
    return info.value.errors


def test_batch_sums_that_overflow_are_refused_naming_the_largest_value():
    # issue 12.4: two key groups at 1.7e308 made every windowed metric inf/NaN and solves hang or 500
    kgs = [{"id": "a", "load": 1.0}, {"id": "b", "load": 1.7e308}, {"id": "c", "load": 1.7e308}]
    err = _errors({"batch_id": 1, "epoch": 0, "key_groups": kgs})[0]
    assert err["loc"] == ("key_groups", 1, "load") and "scale them down" in err["msg"]
    kgs = [{"id": "a", "load": 1.0, "bytes": 1e151}]
    assert _errors({"batch_id": 1, "epoch": 0, "key_groups": kgs})[0]["loc"] == ("key_groups", 0, "bytes")


@pytest.mark.parametrize("body", [
    {"batch_id": 2**63, "epoch": 0},  # beyond a signed 64-bit database column
    {"batch_id": 1, "epoch": False},  # issue 12.5: booleans are not numbers
    {"batch_id": True, "epoch": 0},
    {"batch_id": 1, "epoch": 0, "key_groups": [{"id": "a", "load": True}]},
    {"batch_id": 1, "epoch": 0, "key_groups": [{"id": "a" * 257, "load": 1}]},
    {"batch_id": 1, "epoch": 0, "key_groups": [{"id": "a", "load": 1, "bytes": -1}]},
    {"batch_id": 1, "epoch": 0, "key_groups": [{"id": "a", "load": "1"}]},
])
def test_strict_and_bounded(body):
    assert _errors(body)


def test_record_bytes_are_passed_through_with_nan_where_absent():
    raw = json.dumps({"batch_id": 1, "epoch": 0, "key_groups": [
        {"id": "a", "load": 1, "bytes": 4096}, {"id": "b", "load": 2}]}).encode()
    parsed = parse_stats(raw)
    assert parsed.bytes is not None and parsed.bytes[0] == 4096 and math.isnan(parsed.bytes[1])
    assert parsed.state is None
    assert parse_stats(json.dumps({"batch_id": 1, "epoch": 0, "key_groups": [{"id": "a", "load": 1}]})
                       .encode()).bytes is None
