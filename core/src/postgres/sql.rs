//! The PostgreSQL scope's tables and functions, installed at the first open (and again at the
//! first open of a build with a newer [`VERSION`]). Each operation is one call of one function:
//! one round trip.
//!
//! # Data model
//!
//! - `keylock_keys(prefix, space, key) -> lock_id` (unlogged): the number of a key's advisory
//!   lock. Every key gets its own number from a sequence the first time it is locked, so two
//!   keys never share a lock, whatever their hashes. A force-unlock gives the key a fresh
//!   number: new acquirers lock that one, while the old holder still has the old one, which no
//!   one else asks for any more. Unlogged, so a key's first lock flushes no WAL: a crash
//!   empties the table, and then no session survives either, so no lock is held on any number;
//!   the keys get fresh numbers from the sequence (logged: a number is given twice only after a
//!   crash of a server with `synchronous_commit = off`, which lost the sequence's last WAL, and
//!   then harmlessly: the crash left no row and no lock of the numbers it gave before, and a
//!   call with a token of before the crash matches no row).
//! - The lock itself is PostgreSQL's session-level advisory lock, two 32-bit keys: the first is
//!   `KL_LOCK` plus bits 32 to 47 of the number, the second its low 32 bits. (The two-key form
//!   never meets an application's one-key `pg_advisory_lock(bigint)`.) The server queues
//!   waiters, wakes them, and frees every lock of a session that ends: a holder killed or cut
//!   off loses its keys as soon as the server sees its connection close.
//! - `keylock_fences` (a logged sequence): every exclusive acquisition's fence, so fences rise
//!   across keys, sessions, force-unlocks and restarts, and are never reused (a sequence logs
//!   ahead and flushes at commit; a crash skips values, never repeats them). On a server set to
//!   `synchronous_commit = off` a commit would not wait for that flush, so the calls that draw
//!   fences set it to `local` for their own transaction.
//! - `keylock_owners(lock_id)` and `keylock_holds(lock_id, token)` (unlogged: written per
//!   acquire without a WAL flush, and empty after a crash, when no session survives either):
//!   who holds what, with the holder's backend pid, fence and since when. The exclusive holder
//!   of a key is one row per key, marked `held` and updated in place (a hot key leaves no trail
//!   of dead index entries); shared holders have a row each. A mark left by a holder whose
//!   session ended tells the next holder `owner_died`. A force-unlock marks the holders of the
//!   old number `forced`: the holder's release then frees its lock on the old number (so that
//!   requests already queued on it move to the new one) and reports the hold lost.
//! - A force-unlock marks the old number's row in `keylock_owners` `retired` (making the row if
//!   there was none). An exclusive grant records itself with one update of that row, which
//!   refuses a retired number: the row's lock orders the two, so an exclusive grant is either
//!   recorded before the force-unlock, which then marks it `forced`, or finds the number
//!   retired, lets it go and reads the key's new number. A grant that finds the row needs no
//!   other check; one that finds none checks the key's number under the guard (below).
//! - A *guard* per lock number (transaction-level advisory lock, first key `KL_GUARD` plus the
//!   high bits), for shared grants, whose rows are their own, and for an exclusive grant that
//!   finds no owner row: such a grant holds it shared while it re-reads the key's number and
//!   records itself, a force-unlock (and the sweep, below) holds it exclusively while it moves
//!   the key to a new number (or drops it), so such a grant is either recorded under the number
//!   that stays, or moved away with the rest.
//! - Idle keys' rows are dropped by `keylock_sweep`, which each scope object runs in the
//!   background (the URL's `sweep`): a key whose number no session holds or awaits loses its
//!   row in `keylock_keys` and its number's rows in the others (a died mark stays for the next
//!   holder). A key locked again gets a fresh number. A call that read the old number before
//!   the drop is never granted it: the sweep holds the number's guard while it drops, a shared
//!   grant re-reads the key's number under the guard, and so does an exclusive grant that finds
//!   no owner row (the sweep deletes the row in the same transaction, and keeps a key whose row
//!   a grant is updating or has marked held). Only one session sweeps a prefix at a time (a
//!   transaction-level lock, first key `KL_SWEEP`, second the prefix's `hashtext`).
//! - A *life* lock per session (first key `KL_LIFE`, second the backend pid), taken when a
//!   connection starts: a session that already has one serves another keylock connection
//!   (a pooler in transaction mode), and the open fails. Every call also checks that it runs
//!   in the session its connection started with, so a pooler that moves a connection between
//!   sessions gets an error, never a grant in a session that is not its own.

/// The version of the functions below; an open that finds an older one (or none) replaces
/// them, and one that finds a newer one keeps it. So a new version must keep every call an
/// older one makes, with the same arguments and results (add a function rather than change one).
pub(crate) const VERSION: i32 = 11;

/// The channel a force-unlock notifies, with the old lock number as the payload: the holders'
/// processes (listening on their main sessions) let the old number go at once and fire the
/// holds' lost signals, so requests queued on the old number move to the new one.
pub(crate) const FORCES: &str = "keylock_force";

/// Serializes the installs of every process (a transaction-level advisory lock).
pub(crate) const INSTALL: &str = "\
BEGIN;
SELECT pg_advisory_xact_lock(1802436608, 0);
CREATE TABLE IF NOT EXISTS keylock_schema (version int NOT NULL);
";

/// The keys of prefix `$1` whose current lock number is held or awaited now (granted or
/// waiting in `pg_locks`), for `list`: one pass over the server's advisory locks, joined with
/// the prefix's keys.
pub(crate) const KEYS: &str = "
WITH l AS (
    SELECT DISTINCT classid, objid FROM pg_locks
    WHERE locktype = 'advisory' AND objsubid = 2
      AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
)
SELECT k.space, k.key FROM keylock_keys k
JOIN l ON l.classid = keylock_k1(k.lock_id)::oid AND l.objid = keylock_k2(k.lock_id)::oid
WHERE k.prefix = $1";

/// The keys of semaphore prefix `$1` that are held or awaited now.
pub(crate) const SEM_KEYS: &str = "
SELECT s.space, s.key FROM keylock_sems s
WHERE s.prefix = $1
  AND (EXISTS (SELECT 1 FROM keylock_sem_holds h WHERE h.sem_id = s.sem_id)
       OR EXISTS (SELECT 1 FROM keylock_sem_queue q WHERE q.sem_id = s.sem_id))";

/// The channel releases, cancels and force-unlocks of a semaphore key notify when it has
/// waiters, with the key's number as the payload.
pub(crate) const SEM_FREED: &str = "keylock_sem";

/// The schema, run inside the install transaction when the recorded version is older than
/// [`VERSION`] (or there is none).
pub(crate) const SCHEMA: &str = r#"
CREATE UNLOGGED TABLE IF NOT EXISTS keylock_keys (
    prefix text NOT NULL,
    space smallint NOT NULL,
    key bytea NOT NULL,
    lock_id bigint NOT NULL,
    PRIMARY KEY (prefix, space, key)
);
-- (Version 6 and before made it logged, and an install over theirs keeps it so: converting it
-- takes the table's exclusive lock, which would wait for every waiter that read it, and make
-- every new call wait behind. It works either way; `ALTER TABLE keylock_keys SET UNLOGGED`, run
-- when the scope is quiet, converts it.)
CREATE SEQUENCE IF NOT EXISTS keylock_lock_ids MAXVALUE 281474976710655;
CREATE SEQUENCE IF NOT EXISTS keylock_fences;
CREATE UNLOGGED TABLE IF NOT EXISTS keylock_owners (
    lock_id bigint PRIMARY KEY,
    token text NOT NULL,
    pid int NOT NULL,
    fence bigint NOT NULL,
    since timestamptz NOT NULL,
    forced boolean NOT NULL,
    held boolean NOT NULL,
    died boolean NOT NULL DEFAULT false,
    retired boolean NOT NULL DEFAULT false
) WITH (fillfactor = 50);
-- `died`: what `held` was when the last grant replaced it (the grant's statement returns it);
-- `retired`: force-unlocked, so no grant of this number is recorded again. Added to a table
-- that version 6 made, and only then: an ALTER takes the table's exclusive lock, which would
-- wait for every call that holds a row of it (a call taking several keys holds its first ones'
-- rows while it waits for the next) and make every new call wait behind.
DO $$
BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_attribute
                   WHERE attrelid = 'keylock_owners'::regclass AND attname = 'retired'
                     AND NOT attisdropped) THEN
        ALTER TABLE keylock_owners ADD COLUMN died boolean NOT NULL DEFAULT false,
                                   ADD COLUMN retired boolean NOT NULL DEFAULT false;
    END IF;
END $$;
CREATE UNLOGGED TABLE IF NOT EXISTS keylock_holds (
    lock_id bigint NOT NULL,
    token text NOT NULL,
    pid int NOT NULL,
    mode text NOT NULL,
    fence bigint NOT NULL,
    since timestamptz NOT NULL DEFAULT clock_timestamp(),
    forced boolean NOT NULL DEFAULT false,
    PRIMARY KEY (lock_id, token)
);

-- The two keys of a lock number's advisory lock (k1: 'kl' and bits 32-47; k2: the low bits,
-- as a signed int), of its guard ('km'), and the first key of a session's life lock ('kn');
-- 'ko' serializes installs and 'kp' sweeps (keylock_sweep).
CREATE OR REPLACE FUNCTION keylock_k1(id bigint) RETURNS int
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT (1802240000 + (id >> 32))::int $$;
CREATE OR REPLACE FUNCTION keylock_g1(id bigint) RETURNS int
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$ SELECT (1802305536 + (id >> 32))::int $$;
CREATE OR REPLACE FUNCTION keylock_k2(id bigint) RETURNS int
    LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ((id & 4294967295) - CASE WHEN (id & 4294967295) >= 2147483648
                                     THEN 4294967296 ELSE 0 END)::int $$;

-- Claims this session for one keylock connection; its backend pid.
CREATE OR REPLACE FUNCTION keylock_session() RETURNS int LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory' AND granted
               AND pid = pg_backend_pid() AND classid = 1802371072::oid
               AND objid = pg_backend_pid()::oid AND objsubid = 2) THEN
        RAISE EXCEPTION 'keylock: this server session already serves another keylock connection (a pooler in transaction or statement mode?): keylock needs a session of its own'
            USING ERRCODE = '55KL1';
    END IF;
    PERFORM pg_advisory_lock(1802371072, pg_backend_pid());
    RETURN pg_backend_pid();
END $$;

CREATE OR REPLACE FUNCTION keylock_same_session(me int) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF pg_backend_pid() <> me THEN
        RAISE EXCEPTION 'keylock: this connection now runs in another server session (a pooler in transaction or statement mode?); nothing was taken'
            USING ERRCODE = '55KL2';
    END IF;
END $$;

-- A key's lock number, made the first time the key is locked.
CREATE OR REPLACE FUNCTION keylock_id(p text, sp smallint, k bytea) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    id bigint;
BEGIN
    SELECT lock_id INTO id FROM keylock_keys WHERE prefix = p AND space = sp AND key = k;
    IF id IS NULL THEN
        INSERT INTO keylock_keys (prefix, space, key, lock_id)
            VALUES (p, sp, k, nextval('keylock_lock_ids'))
            ON CONFLICT (prefix, space, key) DO NOTHING;
        SELECT lock_id INTO id FROM keylock_keys WHERE prefix = p AND space = sp AND key = k;
    END IF;
    RETURN id;
END $$;

CREATE OR REPLACE FUNCTION keylock_take(id bigint, m text, wait boolean) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF wait THEN
        IF m = 'x' THEN PERFORM pg_advisory_lock(keylock_k1(id), keylock_k2(id));
        ELSE PERFORM pg_advisory_lock_shared(keylock_k1(id), keylock_k2(id)); END IF;
        RETURN true;
    ELSIF m = 'x' THEN
        RETURN pg_try_advisory_lock(keylock_k1(id), keylock_k2(id));
    ELSE
        RETURN pg_try_advisory_lock_shared(keylock_k1(id), keylock_k2(id));
    END IF;
END $$;

CREATE OR REPLACE FUNCTION keylock_untake(ids bigint[], ms text) RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    i int;
BEGIN
    FOR i IN 1 .. coalesce(cardinality(ids), 0) LOOP
        IF substr(ms, i, 1) = 'x' THEN
            PERFORM pg_advisory_unlock(keylock_k1(ids[i]), keylock_k2(ids[i]));
        ELSE
            PERFORM pg_advisory_unlock_shared(keylock_k1(ids[i]), keylock_k2(ids[i]));
        END IF;
    END LOOP;
END $$;

-- Whether this session holds lock number `id`'s advisory lock in mode `m` now. A wait cut off by
-- lock_timeout or a cancel at the moment its lock was granted ends in that error, yet the server
-- keeps the lock for the session (a lock granted while its wait was being cut off is the
-- waiter's): the caller must not take the error's word for it.
CREATE OR REPLACE FUNCTION keylock_held_here(id bigint, m text) RETURNS boolean
LANGUAGE sql AS $$
    SELECT EXISTS (SELECT 1 FROM pg_locks l
                   WHERE l.locktype = 'advisory' AND l.pid = pg_backend_pid() AND l.granted
                     AND l.objsubid = 2 AND l.classid = keylock_k1(id)::oid
                     AND l.objid = keylock_k2(id)::oid
                     AND l.mode = CASE WHEN m = 'x' THEN 'ExclusiveLock' ELSE 'ShareLock' END)
$$;

-- Records a shared grant of lock number `id` (taken, and still the key's number): its fence,
-- and whether an exclusive holder before it ended without a release.
CREATE OR REPLACE FUNCTION keylock_grant(id bigint, m text, tok text, me int,
                                         OUT fence bigint, OUT died boolean)
LANGUAGE plpgsql AS $$
BEGIN
    -- The last exclusive holder still marked as holding, now that this grant holds the lock:
    -- it died holding (see the exclusive grant in keylock_acquire).
    UPDATE keylock_owners w SET held = false WHERE w.lock_id = id AND w.held;
    died := FOUND;
    SELECT max(h.fence) INTO fence FROM keylock_holds h WHERE h.lock_id = id;
    IF fence IS NULL THEN
        fence := nextval('keylock_fences');
    END IF;
    INSERT INTO keylock_holds (lock_id, token, pid, mode, fence) VALUES (id, tok, me, m, fence);
END $$;

-- Takes every key or none. `wait_ms`: NULL never waits (a try), 0 waits without a limit, else
-- the most milliseconds to wait. NULL arrays when it would block or timed out.
CREATE OR REPLACE FUNCTION keylock_acquire(me int, p text, sps smallint[], ks bytea[], ms text,
                                           tok text, wait_ms bigint,
                                           OUT ids bigint[], OUT fences bigint[],
                                           OUT dieds boolean[])
LANGUAGE plpgsql AS $$
DECLARE
    n int := cardinality(ks);
    i int;
    id bigint;
    m text;
    left_ms bigint;
    taken bigint[] := '{}';
    fs bigint[] := '{}';
    ds boolean[] := '{}';
    deadline timestamptz;
    again bigint;
    got boolean;
    fence bigint;
    died boolean;
    stale boolean;
BEGIN
    -- The hot calls check their session inline (a call of a PL/pgSQL function costs more than
    -- the comparison), and call keylock_same_session only for its error.
    IF pg_backend_pid() <> me THEN
        PERFORM keylock_same_session(me);
    END IF;
    -- Fences outlive a crash (see keylock_fences) only if the WAL that their sequence logs
    -- ahead is flushed before a fence is handed out. A server set to commit asynchronously
    -- would return first, and a crash could then give the same fences again: so a call that
    -- may draw one commits as the default setting does, waiting for its WAL flush when it
    -- wrote any (one grant in 32, the sequence's WAL; the tables are unlogged).
    IF current_setting('synchronous_commit') = 'off' THEN
        PERFORM set_config('synchronous_commit', 'local', true);
    END IF;
    IF wait_ms > 0 THEN
        deadline := clock_timestamp() + wait_ms * interval '1 millisecond';
    END IF;
    -- Each key is recorded as soon as it is taken. A call that ends without the keys undoes
    -- the records with this block: it raises 55KL3, which rolls back what the block wrote.
    BEGIN
        FOR i IN 1 .. n LOOP
            m := substr(ms, i, 1);
            LOOP
                -- The key's number, read here; keylock_id makes it the first time.
                SELECT lock_id INTO id FROM keylock_keys
                    WHERE prefix = p AND space = sps[i] AND key = ks[i];
                IF id IS NULL THEN
                    id := keylock_id(p, sps[i], ks[i]);
                END IF;
                IF deadline IS NULL THEN
                    -- A try, or a wait without a limit: the session's lock_timeout is 0, so
                    -- nothing here raises lock_not_available, and no subtransaction is needed
                    -- to catch it.
                    got := keylock_take(id, m, wait_ms IS NOT NULL);
                ELSE
                    left_ms := ceil(extract(epoch FROM deadline - clock_timestamp()) * 1000);
                    got := left_ms >= 1;
                    IF got THEN
                        PERFORM set_config('lock_timeout', left_ms::text, true);
                        BEGIN
                            got := keylock_take(id, m, true);
                        EXCEPTION WHEN lock_not_available THEN
                            -- Granted as the timeout fired: held all the same (see
                            -- keylock_held_here), and taken as a grant.
                            got := keylock_held_here(id, m);
                        END;
                        PERFORM set_config('lock_timeout', '0', true);
                    END IF;
                END IF;
                IF NOT got THEN
                    -- Would block, or out of time: the key at hand was not taken.
                    id := NULL;
                    IF cardinality(taken) > 0 THEN
                        RAISE EXCEPTION 'keylock: not every key was free' USING ERRCODE = '55KL3';
                    END IF;
                    RETURN;
                END IF;
                IF m = 'x' THEN
                    -- One row per number, updated in place (no index change, so a hot key
                    -- leaves no trail of dead index entries). `died`: the last exclusive holder
                    -- was still marked as holding now that this grant holds the lock, so it
                    -- died holding (its session ended, which freed the lock). A release
                    -- clears the mark and then frees the lock, and this update waits for the
                    -- releaser's commit (the row's lock) before it reads the mark, so a live
                    -- holder's release is never taken for a death. Nothing asks which sessions
                    -- live: a dying session frees its locks in no set order. A retired row
                    -- refuses the grant: the number was force-unlocked.
                    UPDATE keylock_owners w SET token = tok, pid = me,
                            fence = nextval('keylock_fences'), since = clock_timestamp(),
                            forced = false, died = w.held, held = true
                        WHERE w.lock_id = id AND NOT w.retired
                        RETURNING w.fence, w.died,
                                  EXISTS (SELECT 1 FROM keylock_holds h WHERE h.lock_id = id)
                        INTO fence, died, stale;
                    got := FOUND;
                    IF NOT got THEN
                        -- No row yet (the number's first exclusive grant), a retired one (which
                        -- the insert meets and keeps), or none any more: keylock_sweep dropped
                        -- the key's rows, idle, after this call read its number. So the key
                        -- must still have this number, read under the number's guard as a
                        -- shared grant reads it (the sweep holds the guard while it drops).
                        PERFORM pg_advisory_xact_lock_shared(keylock_g1(id), keylock_k2(id));
                        SELECT lock_id INTO again FROM keylock_keys
                            WHERE prefix = p AND space = sps[i] AND key = ks[i];
                        IF again = id THEN
                            INSERT INTO keylock_owners AS w (lock_id, token, pid, fence, since,
                                                             forced, held)
                                VALUES (id, tok, me, nextval('keylock_fences'),
                                        clock_timestamp(), false, true)
                                ON CONFLICT (lock_id) DO UPDATE SET token = excluded.token,
                                    pid = excluded.pid, fence = excluded.fence,
                                    since = excluded.since, forced = false, died = w.held,
                                    held = true
                                WHERE NOT w.retired
                                RETURNING w.fence, w.died,
                                          EXISTS (SELECT 1 FROM keylock_holds h
                                                  WHERE h.lock_id = id)
                                INTO fence, died, stale;
                            got := FOUND;
                        END IF;
                    END IF;
                    IF got THEN
                        IF stale THEN
                            -- Shared holders whose sessions ended.
                            DELETE FROM keylock_holds h WHERE h.lock_id = id;
                        END IF;
                        EXIT;
                    END IF;
                ELSE
                    PERFORM pg_advisory_xact_lock_shared(keylock_g1(id), keylock_k2(id));
                    SELECT lock_id INTO again FROM keylock_keys
                        WHERE prefix = p AND space = sps[i] AND key = ks[i];
                    IF again = id THEN
                        SELECT * INTO fence, died FROM keylock_grant(id, m, tok, me);
                        EXIT;
                    END IF;
                END IF;
                -- Force-unlocked meanwhile (the key has a new number), or dropped idle (it
                -- has none until keylock_id makes one).
                PERFORM keylock_untake(ARRAY[id], m);
            END LOOP;
            taken := taken || id;
            fs := fs || fence;
            ds := ds || died;
        END LOOP;
    EXCEPTION
        WHEN SQLSTATE '55KL3' THEN
            -- A key was not free: the records are rolled back; let go of the keys taken.
            PERFORM keylock_untake(taken, ms);
            RETURN;
        WHEN OTHERS OR query_canceled THEN
            -- Cancelled, or a deadlock found: let go of what this call took, then say so.
            -- (OTHERS alone does not catch a cancel.) That includes the key it was at, if its
            -- lock was granted as the wait was cut off, or before the key joined `taken` (a
            -- waiting session never holds a key it asks for, and a try never waits).
            IF id IS NOT NULL AND NOT (id = ANY (taken)) AND keylock_held_here(id, m) THEN
                PERFORM keylock_untake(ARRAY[id], m);
            END IF;
            PERFORM keylock_untake(taken, ms);
            RAISE;
    END;
    ids := taken;
    fences := fs;
    dieds := ds;
END $$;

-- Ends `tok`'s hold of lock number `id` (its mark and its lock in this session); whether it
-- was still the token's (not force-unlocked). A token with no mark holds nothing here.
CREATE OR REPLACE FUNCTION keylock_release(me int, id bigint, tok text, m text) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    was_forced boolean;
    unlocked boolean;
BEGIN
    IF pg_backend_pid() <> me THEN
        PERFORM keylock_same_session(me);
    END IF;
    -- The mark, then the lock, in one statement (unlocked here rather than by keylock_untake:
    -- one call less on every release).
    IF m = 'x' THEN
        UPDATE keylock_owners w SET held = false
            WHERE w.lock_id = id AND w.token = tok AND w.held
            RETURNING w.forced, pg_advisory_unlock(keylock_k1(id), keylock_k2(id))
            INTO was_forced, unlocked;
    ELSE
        DELETE FROM keylock_holds h WHERE h.lock_id = id AND h.token = tok
            RETURNING h.forced, pg_advisory_unlock_shared(keylock_k1(id), keylock_k2(id))
            INTO was_forced, unlocked;
    END IF;
    RETURN FOUND AND NOT was_forced;
END $$;

-- Releases everything `tok` holds in this session (an acquire whose answer was lost); how many.
CREATE OR REPLACE FUNCTION keylock_forget(me int, tok text) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    n int := 0;
BEGIN
    PERFORM keylock_same_session(me);
    FOR r IN DELETE FROM keylock_holds h WHERE h.token = tok AND h.pid = me
             RETURNING h.lock_id, h.mode LOOP
        PERFORM keylock_untake(ARRAY[r.lock_id], r.mode);
        n := n + 1;
    END LOOP;
    FOR r IN UPDATE keylock_owners w SET held = false
             WHERE w.token = tok AND w.pid = me AND w.held RETURNING w.lock_id LOOP
        PERFORM keylock_untake(ARRAY[r.lock_id], 'x');
        n := n + 1;
    END LOOP;
    RETURN n;
END $$;

-- Whether `tok` still holds lock number `id`.
CREATE OR REPLACE FUNCTION keylock_check(me int, id bigint, tok text, m text) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM keylock_same_session(me);
    IF m = 'x' THEN
        RETURN EXISTS (SELECT 1 FROM keylock_owners w
                       WHERE w.lock_id = id AND w.token = tok AND w.held AND NOT w.forced);
    END IF;
    RETURN EXISTS (SELECT 1 FROM keylock_holds h
                   WHERE h.lock_id = id AND h.token = tok AND NOT h.forced);
END $$;

-- Frees a key whoever holds it: a fresh lock number for the key; whether it was held.
CREATE OR REPLACE FUNCTION keylock_force(p text, sp smallint, k bytea) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    old bigint;
BEGIN
    SELECT lock_id INTO old FROM keylock_keys WHERE prefix = p AND space = sp AND key = k;
    IF old IS NULL THEN
        RETURN false;
    END IF;
    PERFORM pg_advisory_xact_lock(keylock_g1(old), keylock_k2(old));
    IF NOT EXISTS (SELECT 1 FROM pg_locks l WHERE l.locktype = 'advisory' AND l.granted
                   AND l.objsubid = 2 AND l.classid = keylock_k1(old)::oid
                   AND l.objid = keylock_k2(old)::oid) THEN
        RETURN false;
    END IF;
    UPDATE keylock_keys SET lock_id = nextval('keylock_lock_ids')
        WHERE prefix = p AND space = sp AND key = k AND lock_id = old;
    IF NOT FOUND THEN
        -- Moved by another force-unlock, or dropped idle (keylock_sweep), since it was read:
        -- whoever holds the old number now is not granted it.
        RETURN false;
    END IF;
    -- The holders keep their rows (and their locks on the old number) until they release:
    -- their releases and checks then say the hold was lost.
    UPDATE keylock_holds h SET forced = true WHERE h.lock_id = old;
    -- The number retires: an exclusive grant of it that is not recorded yet is refused (see
    -- keylock_acquire), and a recorded one is marked.
    INSERT INTO keylock_owners AS w (lock_id, token, pid, fence, since, forced, held, retired)
        VALUES (old, '', 0, 0, clock_timestamp(), true, false, true)
        ON CONFLICT (lock_id) DO UPDATE SET forced = true, retired = true;
    PERFORM pg_notify('keylock_force', old::text);
    RETURN true;
END $$;

-- Those of lock numbers `ids` that a session holds or awaits now: one look at the server's
-- locks, looked up hashed (the lock table can hold thousands of entries).
CREATE OR REPLACE FUNCTION keylock_busy(ids bigint[]) RETURNS bigint[]
LANGUAGE sql AS $$
    SELECT ARRAY(
        SELECT x FROM unnest(ids) AS x
        WHERE x IN (SELECT ((l.classid::bigint - 1802240000) << 32) | l.objid::bigint
                    FROM pg_locks l
                    WHERE l.locktype = 'advisory' AND l.objsubid = 2
                      AND l.classid::bigint BETWEEN 1802240000 AND 1802240000 + 65535
                      AND l.database = (SELECT oid FROM pg_database
                                        WHERE datname = current_database())))
$$;

-- Drops the rows of prefix `p`'s idle keys, reading up to `batch` keys after (`sp`, `k`) in key
-- order (from the first when `k` is NULL); how many it dropped (NULL when another session is
-- sweeping the prefix), and the last key read (NULL at the prefix's end). A key is idle when no
-- session holds or awaits its number and no exclusive holder died holding it (that mark waits
-- for the next holder's owner_died). Fences come from one sequence, so a key made again later
-- still gets fences above all its old ones.
--
-- Never waits: a key whose guard or owner row another call holds is left for the next sweep.
-- Its guard, taken first, keeps out a shared grant and a number's first exclusive grant (both
-- re-read the key's number under it), and the server's locks, read after, show every session
-- holding or awaiting the number; an exclusive grant that takes the number later updates its
-- owner row, so either the sweep finds the row locked or held and keeps the key, or the
-- grant finds the row gone, re-reads the key under the guard, and lets the number go.
CREATE OR REPLACE FUNCTION keylock_sweep(p text, sp smallint, k bytea, batch int,
                                         OUT dropped int, OUT last_space smallint,
                                         OUT last_key bytea)
LANGUAGE plpgsql AS $$
DECLARE
    r record;
    n int := 0;
    ids bigint[] := '{}';
    sps smallint[] := '{}';
    ks bytea[] := '{}';
    busy bigint[];
    i int;
    kept boolean;
BEGIN
    IF NOT pg_try_advisory_xact_lock(1802502144, hashtext(p)) THEN
        RETURN;
    END IF;
    dropped := 0;
    FOR r IN SELECT c.space, c.key, c.lock_id FROM keylock_keys c
             WHERE c.prefix = p
               AND (c.space, c.key) > (coalesce(sp, -1::smallint), coalesce(k, ''::bytea))
             ORDER BY c.space, c.key LIMIT batch LOOP
        n := n + 1;
        last_space := r.space;
        last_key := r.key;
        IF pg_try_advisory_xact_lock(keylock_g1(r.lock_id), keylock_k2(r.lock_id)) THEN
            ids := ids || r.lock_id;
            sps := sps || r.space;
            ks := ks || r.key;
        END IF;
    END LOOP;
    IF n < batch THEN
        last_space := NULL;
        last_key := NULL;
    END IF;
    busy := keylock_busy(ids);
    FOR i IN 1 .. cardinality(ids) LOOP
        CONTINUE WHEN ids[i] = ANY (busy);
        -- Locked by an exclusive grant recording itself, or marked by one that died holding:
        -- kept. A retired row (force-unlocked) marks nothing a grant could still need.
        SELECT w.held AND NOT w.retired INTO kept FROM keylock_owners w
            WHERE w.lock_id = ids[i] FOR UPDATE SKIP LOCKED;
        IF FOUND THEN
            CONTINUE WHEN kept;
            DELETE FROM keylock_owners w WHERE w.lock_id = ids[i];
        ELSIF EXISTS (SELECT 1 FROM keylock_owners w WHERE w.lock_id = ids[i]) THEN
            CONTINUE;
        END IF;
        -- Shared holders' rows left by sessions that ended.
        DELETE FROM keylock_holds h WHERE h.lock_id = ids[i];
        DELETE FROM keylock_keys c
            WHERE c.prefix = p AND c.space = sps[i] AND c.key = ks[i] AND c.lock_id = ids[i];
        IF FOUND THEN
            dropped := dropped + 1;
        END IF;
    END LOOP;
    -- Once a round (its first batch): the rows of force-unlocked numbers that nobody holds or
    -- awaits any more. No key has such a number, so no grant can need its row: a call that
    -- read the number before the force-unlock and takes it later finds no row, re-reads the
    -- key under the guard, and lets the number go.
    IF k IS NULL THEN
        ids := ARRAY(SELECT w.lock_id FROM keylock_owners w WHERE w.retired);
        busy := keylock_busy(ids);
        FOR r IN SELECT w.lock_id FROM keylock_owners w
                 WHERE w.lock_id = ANY (ids) AND NOT (w.lock_id = ANY (busy))
                 FOR UPDATE SKIP LOCKED LOOP
            DELETE FROM keylock_owners w WHERE w.lock_id = r.lock_id;
            DELETE FROM keylock_holds h WHERE h.lock_id = r.lock_id;
        END LOOP;
    END IF;
END $$;

-- A key as the server sees it: no row when free.
CREATE OR REPLACE FUNCTION keylock_info(p text, sp smallint, k bytea,
                                        OUT exclusive boolean, OUT fence bigint,
                                        OUT holders int, OUT waiters int)
RETURNS SETOF record LANGUAGE plpgsql AS $$
DECLARE
    id bigint;
BEGIN
    SELECT lock_id INTO id FROM keylock_keys WHERE prefix = p AND space = sp AND key = k;
    IF id IS NULL THEN
        RETURN;
    END IF;
    SELECT coalesce(bool_or(l.granted AND l.mode = 'ExclusiveLock'), false),
           count(*) FILTER (WHERE l.granted), count(*) FILTER (WHERE NOT l.granted)
        INTO exclusive, holders, waiters
        FROM pg_locks l
        WHERE l.locktype = 'advisory' AND l.objsubid = 2
          AND l.classid = keylock_k1(id)::oid AND l.objid = keylock_k2(id)::oid
          AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database());
    IF holders = 0 THEN
        RETURN;
    END IF;
    IF exclusive THEN
        SELECT w.fence INTO fence FROM keylock_owners w WHERE w.lock_id = id;
    ELSE
        SELECT max(h.fence) INTO fence FROM keylock_holds h WHERE h.lock_id = id;
    END IF;
    fence := coalesce(fence, 0);
    RETURN NEXT;
END $$;

-- ---- The keyed semaphore (a scope opened with permits) ------------------------------------
--
-- A semaphore's keys live in tables of their own (a lock scope of the same prefix never meets
-- them). Advisory locks do not count, so the units are counted in rows, and every operation on
-- a key runs under the key's guard (exclusive, transaction-level): one short transaction at a
-- time per key, which never waits for anything but another one's guard.
--
-- - `keylock_sems(prefix, space, key) -> sem_id`: the key's number, made by its first acquire
--   and dropped by the sweep (`keylock_sem_sweep`) once the key has no holder, no waiter and no
--   death to report.
-- - `keylock_sem_holds`: one row per acquisition (its units, its fence from keylock_fences, its
--   holder's backend) and a session-level advisory lock on a number of its own (`hold_id`),
--   taken with the row in the holder's session: the holder lives while that lock is held. A
--   session that ends frees the lock; the next call that needs the units finds the row dead and
--   deletes it, and the next grant reports `owner_died`.
-- - `keylock_sem_queue`: the waiters, served strictly in ticket order (a request at the head
--   that does not fit is not passed). A ticket is a number from the same sequence, with a
--   session lock of its own, so a waiter whose session ended is passed over too. Waiters are
--   woken by `NOTIFY keylock_sem` (payload: the key's number) from every release, cancel,
--   force-unlock and grant that leaves a queue behind; a death notifies nobody, so a waiting
--   process also looks again every third of its lease.
-- - `keylock_permits`: each prefix's permits, recorded by its first open (logged: an open after
--   a crash still finds them).
CREATE TABLE IF NOT EXISTS keylock_permits (
    prefix text PRIMARY KEY,
    permits int NOT NULL
);
CREATE UNLOGGED TABLE IF NOT EXISTS keylock_sems (
    prefix text NOT NULL,
    space smallint NOT NULL,
    key bytea NOT NULL,
    sem_id bigint NOT NULL UNIQUE,
    died boolean NOT NULL DEFAULT false,
    PRIMARY KEY (prefix, space, key)
);
CREATE UNLOGGED TABLE IF NOT EXISTS keylock_sem_holds (
    sem_id bigint NOT NULL,
    token text NOT NULL,
    hold_id bigint NOT NULL,
    units int NOT NULL,
    fence bigint NOT NULL,
    pid int NOT NULL,
    since timestamptz NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (sem_id, token)
);
CREATE UNLOGGED TABLE IF NOT EXISTS keylock_sem_queue (
    sem_id bigint NOT NULL,
    ticket bigint NOT NULL,
    token text NOT NULL,
    units int NOT NULL,
    pid int NOT NULL,
    PRIMARY KEY (sem_id, ticket)
);

-- Records prefix `p`'s permits if none are recorded yet; the permits recorded.
CREATE OR REPLACE FUNCTION keylock_sem_permits(p text, n int) RETURNS int
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO keylock_permits (prefix, permits) VALUES (p, n) ON CONFLICT (prefix) DO NOTHING;
    RETURN (SELECT permits FROM keylock_permits WHERE prefix = p);
END $$;

-- Whether the session that took number `n`'s session lock (backend `owner`) has ended. Another
-- backend's lock is tried: taken, nobody held it (and it is let go at once). This backend's own
-- are looked up instead (a try would succeed here, session locks being reentrant): a row with
-- this backend's pid whose lock this session does not hold was left by an earlier session that
-- had the same pid.
CREATE OR REPLACE FUNCTION keylock_sem_dead(n bigint, owner int) RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    IF owner = pg_backend_pid() THEN
        RETURN NOT keylock_held_here(n, 'x');
    END IF;
    IF pg_try_advisory_lock(keylock_k1(n), keylock_k2(n)) THEN
        PERFORM pg_advisory_unlock(keylock_k1(n), keylock_k2(n));
        RETURN true;
    END IF;
    RETURN false;
END $$;

-- The number of prefix `p`'s semaphore key (`sp`, `k`), made if `make`, with the key's guard
-- taken; NULL when it has none. Read again under the guard: a release may have dropped the key
-- meanwhile.
CREATE OR REPLACE FUNCTION keylock_sem_id(p text, sp smallint, k bytea, make boolean)
RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE
    id bigint;
BEGIN
    LOOP
        SELECT s.sem_id INTO id FROM keylock_sems s
            WHERE s.prefix = p AND s.space = sp AND s.key = k;
        IF id IS NULL THEN
            IF NOT make THEN
                RETURN NULL;
            END IF;
            INSERT INTO keylock_sems (prefix, space, key, sem_id)
                VALUES (p, sp, k, nextval('keylock_lock_ids'))
                ON CONFLICT (prefix, space, key) DO NOTHING;
        ELSE
            PERFORM pg_advisory_xact_lock(keylock_g1(id), keylock_k2(id));
            IF EXISTS (SELECT 1 FROM keylock_sems s WHERE s.sem_id = id) THEN
                RETURN id;
            END IF;
        END IF;
    END LOOP;
END $$;

-- After semaphore key `id`'s holds or queue changed, under its guard: wakes its waiters, if
-- it has any.
CREATE OR REPLACE FUNCTION keylock_sem_settle(id bigint) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM keylock_sem_queue q WHERE q.sem_id = id) THEN
        PERFORM pg_notify('keylock_sem', id::text);
    END IF;
END $$;

-- Drops up to `batch` of prefix `p`'s idle semaphore keys (no holder, no waiter, no death to
-- report); how many. Never waits: a key whose guard another call holds is left for the next
-- sweep, and a call that read a dropped key's number finds it gone under the guard and makes
-- the key again.
CREATE OR REPLACE FUNCTION keylock_sem_sweep(p text, batch int) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    id bigint;
    dropped int := 0;
BEGIN
    FOR id IN SELECT s.sem_id FROM keylock_sems s
              WHERE s.prefix = p AND NOT s.died
                AND NOT EXISTS (SELECT 1 FROM keylock_sem_holds h WHERE h.sem_id = s.sem_id)
                AND NOT EXISTS (SELECT 1 FROM keylock_sem_queue q WHERE q.sem_id = s.sem_id)
              LIMIT batch LOOP
        CONTINUE WHEN NOT pg_try_advisory_xact_lock(keylock_g1(id), keylock_k2(id));
        -- Read again under the guard (a statement of its own, so it sees what every call
        -- that held the guard before committed).
        DELETE FROM keylock_sems s
            WHERE s.sem_id = id AND NOT s.died
              AND NOT EXISTS (SELECT 1 FROM keylock_sem_holds h WHERE h.sem_id = id)
              AND NOT EXISTS (SELECT 1 FROM keylock_sem_queue q WHERE q.sem_id = id);
        IF FOUND THEN
            dropped := dropped + 1;
        END IF;
    END LOOP;
    RETURN dropped;
END $$;

-- Takes `units` of the semaphore key's `permits` for `tok`, in this session. `ticket`: the
-- request's place in the queue if it waits already (then it is granted only at the queue's
-- head), else NULL (granted only if nobody waits). `state`: 'granted', with the key's number,
-- the hold's number, its fence and whether a holder died since the last grant; else 'busy'
-- when `wait` is false (nothing queued), or 'queued' with the request's ticket in `tk`.
CREATE OR REPLACE FUNCTION keylock_sem_acquire(me int, p text, sp smallint, k bytea, units int,
                                               permits int, tok text, ticket bigint,
                                               wait boolean, OUT state text, OUT id bigint,
                                               OUT tk bigint, OUT hold bigint,
                                               OUT fence bigint, OUT died boolean)
LANGUAGE plpgsql AS $$
DECLARE
    used bigint;
    head bigint;
    fits boolean;
    gone int;
BEGIN
    IF pg_backend_pid() <> me THEN
        PERFORM keylock_same_session(me);
    END IF;
    -- A fence outlives a crash, as in keylock_acquire.
    IF current_setting('synchronous_commit') = 'off' THEN
        PERFORM set_config('synchronous_commit', 'local', true);
    END IF;
    BEGIN
        id := keylock_sem_id(p, sp, k, true);
        tk := ticket;
        IF tk IS NOT NULL AND NOT EXISTS (SELECT 1 FROM keylock_sem_queue q
                                          WHERE q.sem_id = id AND q.ticket = tk) THEN
            tk := NULL;
        END IF;
        FOR attempt IN 1 .. 2 LOOP
            SELECT coalesce(sum(h.units), 0) INTO used FROM keylock_sem_holds h
                WHERE h.sem_id = id;
            SELECT min(q.ticket) INTO head FROM keylock_sem_queue q WHERE q.sem_id = id;
            fits := used + units <= permits AND (head IS NULL OR head = tk);
            EXIT WHEN fits OR attempt = 2;
            -- Not now: once, the holders and waiters whose sessions ended are passed over.
            DELETE FROM keylock_sem_holds h
                WHERE h.sem_id = id AND keylock_sem_dead(h.hold_id, h.pid);
            GET DIAGNOSTICS gone = ROW_COUNT;
            IF gone > 0 THEN
                UPDATE keylock_sems s SET died = true WHERE s.sem_id = id;
            END IF;
            DELETE FROM keylock_sem_queue q
                WHERE q.sem_id = id AND q.ticket IS DISTINCT FROM tk
                  AND keylock_sem_dead(q.ticket, q.pid);
        END LOOP;
        IF fits THEN
            hold := nextval('keylock_lock_ids');
            fence := nextval('keylock_fences');
            PERFORM pg_advisory_lock(keylock_k1(hold), keylock_k2(hold));
            INSERT INTO keylock_sem_holds (sem_id, token, hold_id, units, fence, pid)
                VALUES (id, tok, hold, units, fence, me);
            IF tk IS NOT NULL THEN
                DELETE FROM keylock_sem_queue q WHERE q.sem_id = id AND q.ticket = tk;
                PERFORM pg_advisory_unlock(keylock_k1(tk), keylock_k2(tk));
                tk := NULL;
            END IF;
            UPDATE keylock_sems s SET died = false WHERE s.sem_id = id AND s.died;
            died := FOUND;
            state := 'granted';
            -- The next in line may fit too.
            PERFORM keylock_sem_settle(id);
        ELSIF NOT wait THEN
            state := 'busy';
        ELSE
            IF tk IS NULL THEN
                tk := nextval('keylock_lock_ids');
                PERFORM pg_advisory_lock(keylock_k1(tk), keylock_k2(tk));
                INSERT INTO keylock_sem_queue (sem_id, ticket, token, units, pid)
                    VALUES (id, tk, tok, units, me);
            END IF;
            state := 'queued';
        END IF;
    EXCEPTION
        WHEN OTHERS OR query_canceled THEN
            -- The rows roll back; the session locks this call took do not.
            IF hold IS NOT NULL AND keylock_held_here(hold, 'x') THEN
                PERFORM pg_advisory_unlock(keylock_k1(hold), keylock_k2(hold));
            END IF;
            IF tk IS NOT NULL AND tk IS DISTINCT FROM ticket AND keylock_held_here(tk, 'x') THEN
                PERFORM pg_advisory_unlock(keylock_k1(tk), keylock_k2(tk));
            END IF;
            RAISE;
    END;
END $$;

-- Ends `tok`'s hold `hold` of semaphore key `id` in this session; whether it was still the
-- token's (not force-unlocked). Its units go back, and the waiters are woken.
CREATE OR REPLACE FUNCTION keylock_sem_release(me int, id bigint, hold bigint, tok text)
RETURNS boolean LANGUAGE plpgsql AS $$
DECLARE
    found_it boolean;
BEGIN
    IF pg_backend_pid() <> me THEN
        PERFORM keylock_same_session(me);
    END IF;
    PERFORM pg_advisory_xact_lock(keylock_g1(id), keylock_k2(id));
    DELETE FROM keylock_sem_holds h
        WHERE h.sem_id = id AND h.token = tok AND h.hold_id = hold AND h.pid = me;
    found_it := FOUND;
    -- A force-unlocked hold has no row any more, but this session still has its lock.
    IF found_it OR keylock_held_here(hold, 'x') THEN
        PERFORM pg_advisory_unlock(keylock_k1(hold), keylock_k2(hold));
    END IF;
    PERFORM keylock_sem_settle(id);
    RETURN found_it;
END $$;

-- Whether `tok` still holds `hold` of semaphore key `id`.
CREATE OR REPLACE FUNCTION keylock_sem_check(me int, id bigint, hold bigint, tok text)
RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    PERFORM keylock_same_session(me);
    RETURN EXISTS (SELECT 1 FROM keylock_sem_holds h
                   WHERE h.sem_id = id AND h.token = tok AND h.hold_id = hold);
END $$;

-- Ends whatever `tok` holds or awaits on any semaphore key in this session (a request that
-- timed out or was cancelled, or whose answer was lost); how many holds and places.
CREATE OR REPLACE FUNCTION keylock_sem_forget(me int, tok text) RETURNS int
LANGUAGE plpgsql AS $$
DECLARE
    id bigint;
    n bigint;
    ended int := 0;
BEGIN
    PERFORM keylock_same_session(me);
    FOR id IN SELECT DISTINCT m.sem_id FROM (
                  SELECT h.sem_id FROM keylock_sem_holds h WHERE h.token = tok AND h.pid = me
                  UNION ALL
                  SELECT q.sem_id FROM keylock_sem_queue q WHERE q.token = tok AND q.pid = me
              ) AS m ORDER BY 1 LOOP
        PERFORM pg_advisory_xact_lock(keylock_g1(id), keylock_k2(id));
        FOR n IN DELETE FROM keylock_sem_holds h
                 WHERE h.sem_id = id AND h.token = tok AND h.pid = me RETURNING h.hold_id LOOP
            PERFORM pg_advisory_unlock(keylock_k1(n), keylock_k2(n));
            ended := ended + 1;
        END LOOP;
        FOR n IN DELETE FROM keylock_sem_queue q
                 WHERE q.sem_id = id AND q.token = tok AND q.pid = me RETURNING q.ticket LOOP
            PERFORM pg_advisory_unlock(keylock_k1(n), keylock_k2(n));
            ended := ended + 1;
        END LOOP;
        PERFORM keylock_sem_settle(id);
    END LOOP;
    RETURN ended;
END $$;

-- Frees every unit of a semaphore key, whoever holds them; whether any was held. Each holder's
-- process hears of it on `keylock_force` (the hold's number), and the waiters are woken.
CREATE OR REPLACE FUNCTION keylock_sem_force(p text, sp smallint, k bytea) RETURNS boolean
LANGUAGE plpgsql AS $$
DECLARE
    id bigint;
    n bigint;
    held boolean := false;
BEGIN
    id := keylock_sem_id(p, sp, k, false);
    IF id IS NULL THEN
        RETURN false;
    END IF;
    FOR n IN DELETE FROM keylock_sem_holds h WHERE h.sem_id = id RETURNING h.hold_id LOOP
        PERFORM pg_notify('keylock_force', n::text);
        held := true;
    END LOOP;
    PERFORM keylock_sem_settle(id);
    RETURN held;
END $$;

-- A semaphore key as the server sees it: no row when nobody holds it (version 10: only the
-- holders and waiters whose sessions live).
CREATE OR REPLACE FUNCTION keylock_sem_info(p text, sp smallint, k bytea,
                                            OUT units bigint, OUT holders int,
                                            OUT waiters int, OUT fence bigint)
RETURNS SETOF record LANGUAGE plpgsql AS $$
DECLARE
    id bigint;
BEGIN
    SELECT s.sem_id INTO id FROM keylock_sems s WHERE s.prefix = p AND s.space = sp AND s.key = k;
    IF id IS NULL THEN
        RETURN;
    END IF;
    -- Only the holders and waiters whose sessions live, as the next acquire counts them; looked
    -- at under the key's guard, as every call does (two tries of a dead holder's lock at once
    -- would show it alive to one of them).
    PERFORM pg_advisory_xact_lock(keylock_g1(id), keylock_k2(id));
    SELECT coalesce(sum(h.units), 0), count(*), coalesce(max(h.fence), 0)
        INTO units, holders, fence FROM keylock_sem_holds h
        WHERE h.sem_id = id AND NOT keylock_sem_dead(h.hold_id, h.pid);
    IF holders = 0 THEN
        RETURN;
    END IF;
    SELECT count(*) INTO waiters FROM keylock_sem_queue q
        WHERE q.sem_id = id AND NOT keylock_sem_dead(q.ticket, q.pid);
    RETURN NEXT;
END $$;
"#;
