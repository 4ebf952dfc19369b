"""A Redis or PostgreSQL URL's password never shows: not in a lock object's name, repr or str,
not in a handle's repr, not in `info`, and not in an error. Every string the front end makes is
searched for the password."""

from __future__ import annotations

import os
import socket
import uuid

import pytest

import keylock

SECRET = f"pw-{uuid.uuid4().hex}"


def with_password(url: str) -> str:
    """`url` with user "default" and the secret as its password (a redis-server without a
    password of its own accepts any password for that user)."""
    assert url.startswith("redis://")
    return url.replace("redis://", f"redis://default:{SECRET}@", 1)


def shown(obj: object) -> list[str]:
    return [repr(obj), str(obj)]


def test_the_password_never_shows_in_names_reprs_or_info(redis_url: str) -> None:
    url = with_password(f"{redis_url}?prefix=py-redact-{os.getpid()}-{uuid.uuid4().hex}")
    pool = keylock.KeyPool.open(url)
    reentrant = keylock.KeyPool.open(url, reentrant=True)
    printed: list[str] = [pool.name, reentrant.name, *shown(pool), *shown(reentrant)]
    assert pool.name == url.replace(SECRET, "***")
    h = pool.lock("k")
    printed += shown(h)
    with h:
        printed += shown(h)
        info = pool.info("k")
        assert info is not None
        printed += shown(info)
        late = pool.lock("k")
        assert late.acquire(timeout=0.01) is False
        printed += shown(late)
    with pytest.raises(keylock.NotLockedError) as released:
        h.release()
    printed += shown(released.value)
    with reentrant.lock("r"):
        printed += shown(reentrant.lock("r"))
    leaks = [s for s in printed if SECRET in s]
    assert leaks == [], leaks
    assert any("***" in s for s in printed)


def test_the_password_never_shows_in_an_unreachable_scopes_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # Nobody listens on the port: opening, or the first call, fails naming the scope.
    url = with_password(f"redis://127.0.0.1:{port}/0?timeout=200ms")
    printed: list[str] = []
    try:
        pool = keylock.KeyPool.open(url)
    except ValueError as e:
        pytest.skip(f"this build has no Redis scope: {e}")
    except keylock.KeylockError as e:
        printed += shown(e)
    else:
        printed += [pool.name, *shown(pool)]
        with pytest.raises(keylock.KeylockError) as failed:
            pool.is_locked("k")
        printed += shown(failed.value)
    leaks = [s for s in printed if SECRET in s]
    assert leaks == [], leaks
    assert any("***" in s for s in printed), printed


def _postgres_password(url: str) -> str:
    """The password of a postgres://USER:PASSWORD@HOST... URL."""
    return url.split("://", 1)[1].split("@", 1)[0].split(":", 1)[1]


def test_a_postgres_password_never_shows_in_names_reprs_info_or_errors(postgres_url: str) -> None:
    """The same search on the PostgreSQL scope, whose test cluster really needs its password:
    names, reprs, info, a refused release and a timed-out acquire."""
    secret = _postgres_password(postgres_url)
    assert len(secret) >= 16
    url = f"{postgres_url}?prefix=py-redact-{os.getpid()}-{uuid.uuid4().hex}"
    pool = keylock.KeyPool.open(url)
    other = keylock.KeyPool.open(url, reentrant=True)
    printed: list[str] = [pool.name, other.name, *shown(pool), *shown(other)]
    assert pool.name == url.replace(secret, "***")
    h = pool.lock("k")
    printed += shown(h)
    assert h.acquire(timeout=30)
    printed += shown(h)
    info = pool.info("k")
    assert info is not None and info.lease_remaining is None
    printed += shown(info)
    late = other.lock("k", timeout=0.01)
    with pytest.raises(keylock.LockTimeout) as timed_out:
        with late:
            pass
    printed += [*shown(late), *shown(timed_out.value)]
    assert other.force_unlock("k") is True
    # A release refused (force-unlocked), and one of a handle that holds nothing.
    with pytest.raises(keylock.NotOwnerError) as refused:
        h.release()
    with pytest.raises(keylock.NotLockedError) as released:
        h.release()
    printed += [*shown(refused.value), *shown(released.value)]
    leaks = [s for s in printed if secret in s]
    assert leaks == [], leaks
    assert any("***" in s for s in printed)


def test_a_wrong_postgres_password_is_refused_without_showing_it(postgres_url: str) -> None:
    secret = _postgres_password(postgres_url)
    wrong = f"wrong-{uuid.uuid4().hex}"
    url = postgres_url.replace(f":{secret}@", f":{wrong}@", 1)
    with pytest.raises(keylock.PermissionDeniedError) as refused:
        keylock.KeyPool.open(url)
    printed = shown(refused.value)
    assert [s for s in printed if wrong in s or secret in s] == [], printed
    assert any("***" in s for s in printed), printed


def test_a_postgres_password_never_shows_in_an_unreachable_scopes_error() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"postgres://keylock:{SECRET}@127.0.0.1:{port}/keylock?connect_timeout=200ms"
    try:
        keylock.KeyPool.open(url)
    except keylock.UnavailableError as e:
        printed = shown(e)
    except ValueError as e:
        pytest.skip(f"this build has no PostgreSQL scope: {e}")
    else:
        pytest.fail("a PostgreSQL scope with no server opened")
    leaks = [s for s in printed if SECRET in s]
    assert leaks == [], leaks
    assert any("***" in s for s in printed), printed
