"""The hot-path statistics parser accepts exactly what the documented pydantic schema accepts, with the same
values; whatever it does not handle falls back to pydantic (same 422 field paths)."""

from __future__ import annotations

import json
import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from api.schemas import StatsRequest
from api.stats_parser import StatsInvalid, _fast, parse_stats

number = st.one_of(st.integers(-5, 10**6), st.floats(allow_nan=False, allow_infinity=False, width=64),
                   st.just(-0.0), st.booleans(), st.text(max_size=3), st.none())
key = st.sampled_from(["id", "load", "state_bytes", "extra", "src", "dst", "rate"])
kg = st.one_of(
    st.fixed_dictionaries({"id": st.text(max_size=4), "load": number},
                          optional={"state_bytes": number}),
    st.dictionaries(key, st.one_of(number, st.text(max_size=3)), max_size=4),
    st.integers(), st.text(max_size=2),
)
edge = st.one_of(st.fixed_dictionaries({"src": st.text(max_size=3), "dst": st.text(max_size=3), "rate": number}),
                 st.dictionaries(key, number, max_size=4))
body = st.fixed_dictionaries(
    {"batch_id": st.one_of(st.integers(-2, 10**9), st.floats(allow_nan=False), st.text(max_size=2)),
     "epoch": st.one_of(st.integers(-1, 5), st.booleans())},
    optional={"key_groups": st.lists(kg, max_size=6), "communication": st.lists(edge, max_size=3),
              "other": st.integers()})


def _same(a: np.ndarray, b: list) -> bool:
    return a.shape == (len(b),) and all((math.isnan(x) and y is None) or x == y for x, y in zip(a.tolist(), b))


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
        if fast.state is None:
            assert all(k.state_bytes is None for k in model.key_groups)
        else:
            assert _same(fast.state, [k.state_bytes for k in model.key_groups])
        assert (fast.src, fast.dst) == ([c.src for c in model.communication], [c.dst for c in model.communication])
        assert fast.rate.tolist() == [c.rate for c in model.communication]
    # parse_stats (fast path + fallback) accepts iff the schema does
    try:
        parsed = parse_stats(raw)
        assert model is not None and parsed.ids == [k.id for k in model.key_groups]
    except StatsInvalid as exc:
        assert model is None and exc.errors


def test_typical_body_takes_the_fast_path():
    kgs = [{"id": f"agg/{k}", "load": 1.5 * k, "state_bytes": 4096} for k in range(1000)]
    raw = json.dumps({"batch_id": 3, "epoch": 1, "key_groups": kgs,
                      "communication": [{"src": "agg/1", "dst": "agg/2", "rate": 2}]}).encode()
    fast = _fast(raw)
    assert fast is not None and len(fast.ids) == 1000 and fast.state is not None and fast.rate.tolist() == [2.0]
