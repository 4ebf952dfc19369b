"""The key fixture every front end checks (core/tests/keys.json): Python gives every entry the
bytes the fixture lists, or the same rejection as C and Node."""

from __future__ import annotations

import json
import struct
from pathlib import Path
from typing import Any

import pytest

import keylock

FIXTURE = json.loads((Path(__file__).parents[2] / "core" / "tests" / "keys.json").read_text())
ENTRIES: list[dict[str, Any]] = FIXTURE["keys"]
# What each rejection raises in Python (both are ValueError or ArithmeticError, as the core's
# InvalidArgument maps to), and the phrase every front end's message contains.
RAISES = {"lone_surrogate": UnicodeEncodeError, "integer_out_of_range": OverflowError}


def _key(entry: dict[str, Any]) -> object:
    repeat = entry.get("repeat", 1)
    if "text" in entry:
        units = entry["text"] * repeat + entry.get("tail", [])
        raw = struct.pack(f"<{len(units)}H", *units)
        # A str of the code points these units spell: pairs combine, lone surrogates stay.
        return raw.decode("utf-16-le", "surrogatepass")
    if "int" in entry:
        return int(entry["int"])
    return bytes.fromhex(entry["bytes"]) * repeat


@pytest.mark.parametrize("entry", ENTRIES, ids=[e["name"] for e in ENTRIES])
def test_fixture_entry(entry: dict[str, Any]) -> None:
    key = _key(entry)
    if "error" in entry:
        phrase = FIXTURE["errors"][entry["error"]]
        with pytest.raises(RAISES[entry["error"]], match=phrase):
            keylock.key_bytes(key)  # type: ignore[arg-type]
        with pytest.raises(RAISES[entry["error"]], match=phrase):
            keylock.KeyPool().lock(key)  # type: ignore[arg-type]
        return
    expected = bytes.fromhex(entry["hex"]) * entry.get("repeat", 1)
    assert keylock.key_bytes(key) == expected  # type: ignore[arg-type]
    # And the locks take it as that key.
    pool = keylock.KeyPool()
    with pool.lock(key):  # type: ignore[arg-type]
        assert pool.is_locked(expected)


def test_fixture_has_every_kind() -> None:
    kinds = {k for e in ENTRIES for k in ("text", "int", "bytes") if k in e}
    assert kinds == {"text", "int", "bytes"}
    assert set(RAISES) == set(FIXTURE["errors"])
