"""How long a watch waits before it tries again, and a client-side request budget, as
client-go gives every informer and every client.

- Backoff: the reflector's retry delay (client-go tools/cache/reflector.go NewReflector:
  wait.Backoff{Duration: 800ms, Cap: 30s, Factor: 2, Jitter: 1.0, Steps: ceil(30s/800ms)}
  driven by Backoff.DelayWithReset(clock, 2 min)). Each delay is jittered up to twice its
  base (wait.Jitter), so that many watches failing together do not retry together; once
  capped the delays stay in [30 s, 60 s); the sequence starts again from 800 ms when two
  minutes have passed since it last started (backoffManager.Step).
- retry_delay: an answer's Retry-After (client-go rest/with_retry.go checkWait: only on
  429 and 5xx, whole seconds) wins over a shorter backoff.
- TokenBucket: client-go's flowcontrol.NewTokenBucketRateLimiter (golang.org/x/time/rate
  underneath): `burst` requests at once, then `qps` per second, each waiter served in
  the order it asked.

Pure arithmetic with an injectable clock and random source: no I/O.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Callable

# client-go tools/cache/reflector.go
REFLECTOR_INITIAL = 0.8
REFLECTOR_CAP = 30.0
REFLECTOR_FACTOR = 2.0
REFLECTOR_JITTER = 1.0
REFLECTOR_RESET = 120.0
# A Retry-After beyond this is taken as this (a proxy's mistake must not park a watch
# for hours; the API server's priority and fairness answers 1 s).
RETRY_AFTER_MAX = 60.0


class Backoff:
    """wait.Backoff.DelayWithReset: `step()` is the next delay in seconds."""

    def __init__(self, initial: float = REFLECTOR_INITIAL, cap: float = REFLECTOR_CAP,
                 factor: float = REFLECTOR_FACTOR, jitter: float = REFLECTOR_JITTER,
                 reset: float = REFLECTOR_RESET, *,
                 clock: Callable[[], float] = time.monotonic,
                 rand: Callable[[], float] = random.random) -> None:
        if initial <= 0 or factor < 1 or jitter < 0 or cap < initial:
            raise ValueError(f"Backoff(initial={initial}, cap={cap}, factor={factor}, "
                             f"jitter={jitter}): need 0 < initial <= cap, factor >= 1, "
                             "jitter >= 0")
        self.initial = initial
        self.cap = cap
        self.factor = factor
        self.jitter = jitter
        self.reset_after = reset
        self._clock = clock
        self._rand = rand
        self._initial_steps = math.ceil(cap / initial)
        self._duration = initial
        self._steps = self._initial_steps
        self._last_start = clock()

    def reset(self) -> None:
        """Start over from the initial delay."""
        self._duration = self.initial
        self._steps = self._initial_steps
        self._last_start = self._clock()

    def step(self) -> float:
        """The next delay (backoffManager.Step, then wait.delay)."""
        if self.reset_after > 0 and self._clock() - self._last_start > self.reset_after:
            self.reset()
        duration = self._duration
        if self._steps < 1:
            return self._jittered(duration)
        self._steps -= 1
        nxt = duration * self.factor
        if nxt > self.cap:
            nxt = self.cap
            self._steps = 0
        self._duration = nxt
        return self._jittered(duration)

    def _jittered(self, duration: float) -> float:
        # wait.Jitter: duration + rand[0,1) * maxFactor * duration
        return duration + self._rand() * self.jitter * duration if self.jitter > 0 else duration


def retry_delay(backoff: Backoff, retry_after: float | None) -> float:
    """The wait before the next attempt: the backoff's next step, or the server's
    Retry-After when that is longer (with_retry.go Before: `if retryAfter.Wait > delay`)."""
    delay = backoff.step()
    if retry_after is not None and retry_after > delay:
        return min(retry_after, RETRY_AFTER_MAX)
    return delay


def parse_retry_after(status: int, value: str | None) -> float | None:
    """Seconds of a Retry-After header on a 429 or 5xx answer (with_retry.go checkWait and
    retryAfterSeconds: an integer number of seconds; an HTTP date or anything else is
    ignored); None when there is none."""
    if value is None or not (status == 429 or status >= 500):
        return None
    value = value.strip()
    if not value.isdigit():
        return None
    return float(min(int(value), int(RETRY_AFTER_MAX)))


class TokenBucket:
    """flowcontrol.NewTokenBucketRateLimiter(qps, burst): `reserve()` takes a token now and
    says how long to wait for it; tokens may go negative, so waiters are served in the
    order they asked (rate.Limiter.Wait). `wait()` sleeps that long: no await at all while
    tokens are left, so the bind path pays a subtraction until it reaches the limit."""

    def __init__(self, qps: float, burst: int, *,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if qps <= 0 or burst < 1:
            raise ValueError(f"TokenBucket(qps={qps}, burst={burst}): need qps > 0 and "
                             "burst >= 1")
        self.qps = qps
        self.burst = burst
        self._clock = clock
        self._tokens = float(burst)
        self._last = clock()
        self.throttled = 0  # requests that had to wait
        self.waited = 0.0   # seconds they waited in all

    def reserve(self) -> float:
        """Take one token; the seconds until it is due (0: go now)."""
        now = self._clock()
        tokens = self._tokens + (now - self._last) * self.qps
        if tokens > self.burst:
            tokens = self.burst
        self._last = now
        tokens -= 1.0
        self._tokens = tokens
        if tokens >= 0:
            return 0.0
        delay = -tokens / self.qps
        self.throttled += 1
        self.waited += delay
        return delay

    async def wait(self) -> None:
        delay = self.reserve()
        if delay > 0:
            await asyncio.sleep(delay)
