"""The one wait the tests share: ``wait_until`` and its async form."""

from __future__ import annotations

import itertools

import anyio
import pytest

from tests.support import wait_until, wait_until_async


def test_wait_until_returns_the_first_truthy_value():
    calls = itertools.count(1)

    assert wait_until(lambda: next(calls) >= 3 and "ready", interval=0.001) == "ready"
    assert next(calls) == 4  # polled three times, not once more


def test_wait_until_fails_naming_what_it_waited_for_and_the_state_then():
    with pytest.raises(AssertionError, match=r"timed out after 0.05 s waiting for the queue: 3 left"):
        wait_until(lambda: False, timeout=0.05, interval=0.01, message=lambda: "the queue: 3 left")


def test_wait_until_counts_an_ignored_exception_as_not_yet_and_lets_others_through():
    attempts = iter([FileNotFoundError(), FileNotFoundError(), "found"])

    def probe():
        attempt = next(attempts)
        if isinstance(attempt, Exception):
            raise attempt
        return attempt

    assert wait_until(probe, interval=0.001, ignoring=(FileNotFoundError,)) == "found"
    with pytest.raises(ZeroDivisionError):
        wait_until(lambda: 1 / 0, timeout=1, ignoring=(FileNotFoundError,))


def test_wait_until_async_awaits_the_predicate_on_the_event_loop():
    async def main():
        seen: list[int] = []

        async def grown():
            await anyio.sleep(0)
            seen.append(len(seen))
            return len(seen) >= 3 and list(seen)

        return await wait_until_async(grown, interval=0.001)

    assert anyio.run(main) == [0, 1, 2]
