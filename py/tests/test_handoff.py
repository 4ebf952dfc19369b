"""Wake-ups that fire on a thread that is not Python's (the core's lease timer, a remote scope's
runtime) reach Python through a thread of keylock's. At exit that thread finishes the job it is
running before the interpreter finalizes, and runs none after: a thread that is not Python's and
takes the GIL back during finalization is ended by the interpreter in a way that aborts the
process."""

from __future__ import annotations

from conftest import run_script


def test_a_wake_up_under_way_at_exit_does_not_abort_the_process() -> None:
    # The lease timer wakes the task's waiter when the lease ends; the hand-off thread then
    # calls the loop's call_soon_threadsafe, made slow here: for half a second it lets the GIL
    # go and takes it back, over and over, so the program ends while the hand-off thread is
    # inside Python and keeps coming back for the GIL.
    proc = run_script(
        """
import asyncio, threading, time
import keylock

inside = threading.Event()

async def main():
    loop = asyncio.get_running_loop()
    post = loop.call_soon_threadsafe
    def slow(*args):
        inside.set()
        end = time.monotonic() + 0.5
        while time.monotonic() < end:
            time.sleep(0)
        return post(*args)
    loop.call_soon_threadsafe = slow
    pool = keylock.KeyPool()
    holder = pool.lock("k", lease=0.05)
    assert holder.acquire(blocking=False)
    waiter = asyncio.ensure_future(pool.lock("k").acquire_async(timeout=30))
    await asyncio.sleep(0)
    assert not waiter.done()
    while not inside.is_set():
        await asyncio.sleep(0.005)
    waiter.cancel()

asyncio.run(main())
print("exiting")
""",
        timeout=30,
    )
    assert proc.stdout.strip() == "exiting"
