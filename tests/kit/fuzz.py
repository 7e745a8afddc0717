"""Settings shared by the fuzz tests (marker `fuzz`): a bounded, reproducible run in `make test`, and a long
one with `FLATSHARE_FUZZ=long` (`make fuzz`), which multiplies every test's example count by `LONG_FACTOR`
and draws fresh random examples instead of the fixed ones."""

from __future__ import annotations

import json
import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

LONG_FACTOR = 20


def long_run() -> bool:
    return os.environ.get("FLATSHARE_FUZZ", "") == "long"


def examples(bounded: int) -> int:
    """`bounded` examples, or `LONG_FACTOR` times as many in a long run."""
    return bounded * LONG_FACTOR if long_run() else bounded


def fuzz_settings(bounded: int) -> settings:
    """Hypothesis settings for a fuzz test of `bounded` examples: no deadline (a loaded 2-core box), no
    example database (nothing carries over between runs), derandomized unless the run is long."""
    return settings(
        max_examples=examples(bounded),
        deadline=None,
        derandomize=not long_run(),
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )


# -- JSON that Python's json module mishandles, as text --------------------------------------------------
def json_number_text() -> st.SearchStrategy[str]:
    digits = st.integers(1, 6000).map(lambda n: "9" * n)
    return st.one_of(
        digits,
        digits.map(lambda d: "-" + d),
        st.sampled_from(["NaN", "Infinity", "-Infinity", "1e400", "-1e400", "1e-400", "-0", "0.0e0"]),
        st.integers(-(2**70), 2**70).map(str),
        st.floats(allow_nan=False, allow_infinity=False).map(repr),
        st.integers(1, 999).map(lambda e: f"1e{e}"),
    )


def json_string_text() -> st.SearchStrategy[str]:
    escapes = st.sampled_from(
        ["\\ud800", "\\udfff", "\\ud83d\\ude00", "\\ud83d", "\\ude00\\ud83d", "\\u0000", "\\n", "\\\\"]
    )
    plain = st.text(max_size=40).map(lambda s: json.dumps(s)[1:-1])
    return st.lists(st.one_of(escapes, plain), max_size=4).map(lambda parts: '"' + "".join(parts) + '"')


def odd_json() -> st.SearchStrategy[str]:
    """JSON text (mostly valid, sometimes not quite) made of the values Python's json mishandles."""
    leaves = st.one_of(
        json_number_text(), json_string_text(), st.sampled_from(["true", "false", "null", "{}", "[]"])
    )
    nested = st.recursive(
        leaves,
        lambda inner: st.one_of(
            st.lists(inner, max_size=4).map(lambda xs: "[" + ",".join(xs) + "]"),
            st.lists(st.tuples(json_string_text(), inner), max_size=4).map(
                lambda kv: "{" + ",".join(f"{k}:{v}" for k, v in kv) + "}"
            ),
        ),
        max_leaves=12,
    )
    deep = st.tuples(st.integers(1, 3000), leaves).map(lambda t: "[" * t[0] + t[1] + "]" * t[0])
    return st.one_of(nested, deep)


# -- hostile files: absurd values and planted symlinks (issue 32) -------------------------------------------
ABSURD_VALUES: tuple[object, ...] = (
    -100,
    -7,
    -1,
    0,
    2**63,
    10**19,
    1e300,
    -1e300,
    1e12,
    1e-300,
    2_000_000,
    "x",
    "",
    None,
    True,
    [],
    {},
    [1],
    {"a": 1},
)


def absurd_value() -> st.SearchStrategy[object]:
    """A JSON value a field of a saved file should not hold (or only just may): huge, negative, mistyped."""
    return st.one_of(st.sampled_from(ABSURD_VALUES), st.floats(allow_nan=False, allow_infinity=False))


def odd_file() -> st.SearchStrategy[str]:
    """The text of a JSON or JSON-lines file gone wrong: odd JSON, a list, deep nesting, nothing, bytes."""
    return st.one_of(
        odd_json(),
        st.just(""),
        st.just("[1, 2]\n"),
        st.just("[" * 100_000 + "]" * 100_000),
        st.text(max_size=64),
    )


def planted(names: tuple[str, ...]) -> st.SearchStrategy[list[str]]:
    """Which of a command's output names to plant a symlink at (one or more)."""
    return st.lists(st.sampled_from(names), min_size=1, max_size=len(names), unique=True)
