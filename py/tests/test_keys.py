"""Key conversion: str -> UTF-8, buffers -> contents, int -> 8 bytes big-endian signed."""

from __future__ import annotations

import array
import struct

import pytest

import keylock


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("", b""),
        ("abc", b"abc"),
        ("\u00e9\u6f22\U0001f600", "\u00e9\u6f22\U0001f600".encode()),
        (b"\x00\xff", b"\x00\xff"),
        (bytearray(b"xy"), b"xy"),
        (memoryview(b"hello")[1:4], b"ell"),
        (0, b"\x00" * 8),
        (1, b"\x00\x00\x00\x00\x00\x00\x00\x01"),
        (-1, b"\xff" * 8),
        (2**63 - 1, b"\x7f" + b"\xff" * 7),
        (-(2**63), b"\x80" + b"\x00" * 7),
        (0x0102030405060708, bytes(range(1, 9))),
    ],
)
def test_key_bytes_mapping(key: object, expected: bytes) -> None:
    assert keylock.key_bytes(key) == expected  # type: ignore[arg-type]


def test_int_is_signed_64_bit_big_endian() -> None:
    for v in (5, -5, 12345678901234, -(2**40)):
        assert keylock.key_bytes(v) == struct.pack(">q", v)


def test_int_subclass_accepted() -> None:
    import enum

    class Color(enum.IntEnum):
        RED = 7

    assert keylock.key_bytes(Color.RED) == keylock.key_bytes(7)


@pytest.mark.parametrize("value", [2**63, -(2**63) - 1, 10**30])
def test_int_out_of_range(value: int) -> None:
    with pytest.raises(OverflowError, match="signed 64-bit"):
        keylock.key_bytes(value)
    with pytest.raises(OverflowError, match="signed 64-bit"):
        keylock.KeyPool().lock(value)


@pytest.mark.parametrize("value", [True, False])
def test_bool_rejected(value: bool) -> None:
    with pytest.raises(TypeError, match="bool"):
        keylock.key_bytes(value)
    with pytest.raises(TypeError, match="bool"):
        keylock.KeyPool().lock(value)


@pytest.mark.parametrize(
    ("value", "type_name"),
    [
        (1.5, "float"),
        (None, "NoneType"),
        ((1, 2), "tuple"),
        (["a"], "list"),
        (object(), "object"),
        (array.array("b", [1]), "array"),
        (frozenset(), "frozenset"),
    ],
)
def test_other_types_raise_type_error_naming_the_type(value: object, type_name: str) -> None:
    pool, striped = keylock.KeyPool(), keylock.StripedLock(8)
    for call in (
        keylock.key_bytes,
        pool.lock,
        pool.read,
        pool.write,
        pool.is_locked,
        pool.force_unlock,
        pool.info,
        striped.lock,
        striped.is_locked,
        striped.stripe_of,
        # In lock_many a tuple is a (key, mode) pair, never a key: checked below.
        lambda k: pool.lock_many([(k, "shared")]),
        lambda k: striped.lock_many(["ok", (k, "exclusive")]),
    ):
        with pytest.raises(TypeError, match=type_name):
            call(value)
    if not isinstance(value, tuple):
        for call in (lambda k: pool.lock_many([k]), lambda k: striped.lock_many(["ok", k])):
            with pytest.raises(TypeError, match=type_name):
                call(value)


@pytest.mark.parametrize(
    ("entry", "error", "match"),
    [
        (("k",), TypeError, "pair"),
        (("k", "shared", 1), TypeError, "pair"),
        (("k", 1), TypeError, "mode"),
        (("k", "read"), ValueError, "unknown mode"),
        (("k", "Shared"), ValueError, "unknown mode"),
    ],
)
def test_lock_many_entries_are_keys_or_key_mode_pairs(
    entry: tuple[object, ...], error: type[Exception], match: str
) -> None:
    pool = keylock.KeyPool()
    with pytest.raises(error, match=match):
        pool.lock_many(["a", entry])
    assert pool.lock_many([("k", "shared"), "j"]).modes == ["shared", "exclusive"]


@pytest.mark.parametrize("text", ["\ud800", "a\udc00", "\ud83d\ude00", "ok\udfff!"])
def test_lone_surrogate_str_raises(text: str) -> None:
    # A str is code points: "\ud83d\ude00" is two lone surrogates, not an emoji (which would be
    # "\U0001f600"). The error is CPython's UnicodeEncodeError, at the same position, with the
    # reason every keylock front end gives.
    pool, striped = keylock.KeyPool(), keylock.StripedLock(8)
    for call in (keylock.key_bytes, pool.lock, striped.lock, lambda k: pool.lock_many(["a", k])):
        with pytest.raises(UnicodeEncodeError, match="lone surrogate") as info:
            call(text)
        assert isinstance(info.value, ValueError)
        assert (info.value.start, info.value.end) == _codec_error_span(text)


def _codec_error_span(text: str) -> tuple[int, int]:
    try:
        text.encode()
    except UnicodeEncodeError as e:
        return e.start, e.end
    raise AssertionError("expected an encode error")


def test_same_bytes_same_key() -> None:
    pool = keylock.KeyPool()
    with pool.lock("ab"):
        for same in (b"ab", bytearray(b"ab"), memoryview(b"xaby")[1:3]):
            assert pool.is_locked(same)
            assert not pool.lock(same).acquire(blocking=False)
        assert not pool.is_locked("abc")
    with pool.lock(1):
        assert pool.is_locked(b"\x00" * 7 + b"\x01")
        assert not pool.is_locked("1")


def test_bytearray_key_is_copied() -> None:
    pool = keylock.KeyPool()
    buf = bytearray(b"k1")
    h = pool.lock(buf)
    buf[1:2] = b"2"
    with h:
        assert pool.is_locked("k1")
        assert not pool.is_locked("k2")
    assert h.key == b"k1"


def test_lock_many_rejects_a_single_str_or_bytes() -> None:
    pool = keylock.KeyPool()
    for bad in ("ab", b"ab"):
        with pytest.raises(TypeError, match="iterable of keys"):
            pool.lock_many(bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="int"):
        pool.lock_many(5)  # type: ignore[arg-type]


def test_striped_keys_agree_with_bytes() -> None:
    s = keylock.StripedLock(4096, seed=42)
    for key in ("x", "user:1", 17, b"\x00"):
        assert s.stripe_of(key) == s.stripe_of(keylock.key_bytes(key))
        assert 0 <= s.stripe_of(key) < s.stripes
