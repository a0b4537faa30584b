"""The retry policy every paying harness shares: retry only what provably was not processed, inside the cap.

Retries happen only where the response proves nothing was processed: HTTP 429, an
overload status (Anthropic's 529) and a connection that could not be established
(refused, unreachable). They use tenacity with ``stop_before_delay(cap)`` and
exponential backoff with jitter (at least any ``retry-after`` the server sent), and
every attempt's timeout is what is left of the wall-clock cap, so the whole call stays
inside it. The SDKs' own retries are off (``max_retries=0``). A timeout, any other HTTP
status, or a connection dropped after the request was sent raises
:class:`~consolidation.errors.HarnessError`: the request may have been
processed, and a second paid call is worse than a failed run.

The SDKs (Anthropic's and OpenAI's, generated from one template) raise the same shapes
of error: :class:`SdkErrors` names a vendor's classes, so this module imports neither.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from tenacity import RetryCallState, Retrying, retry_if_exception, stop_before_delay, wait_exponential_jitter
from tenacity.stop import stop_base

from consolidation.errors import HarnessError, ResponseTooLarge
from consolidation.harnesses.calls import CallGuard

log = logging.getLogger(__name__)

T = TypeVar("T")
_MAX_RETRY_AFTER_S = 60.0
# A retry is not started unless at least this much of the cap is left for it.
_MIN_ATTEMPT_S = 0.05


@dataclass(frozen=True, slots=True)
class SdkErrors:
    """One SDK's error classes, and how its failures are named in a run's error.

    ``status`` has ``status_code`` and ``response`` (the HTTP response); ``timeout`` is a
    subclass of ``connection``; ``base`` is the root of everything the SDK raises.
    ``service`` names the other end in messages ("the Anthropic API").
    """

    base: type[Exception]
    status: type[Exception]
    connection: type[Exception]
    timeout: type[Exception]
    service: str
    retryable_statuses: frozenset[int]


def connect_failed(exc: BaseException) -> bool:
    """The connection was never established, so the request cannot have been processed."""
    import httpx2

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, (httpx2.ConnectError, ConnectionRefusedError)):
            return True
        current = current.__cause__ or current.__context__
    return False


def is_retryable(exc: BaseException, errors: SdkErrors) -> bool:
    """A retryable status, or a connection that could not be established; never a timeout."""
    if isinstance(exc, errors.status):
        return getattr(exc, "status_code", None) in errors.retryable_statuses
    if isinstance(exc, errors.timeout):
        return False
    if isinstance(exc, errors.connection):
        return connect_failed(exc)
    return False


def retry_after_s(exc: BaseException | None, errors: SdkErrors) -> float | None:
    """The server's ``retry-after-ms`` / ``retry-after`` in seconds (at most 60), if it sent one."""
    if exc is None or not isinstance(exc, errors.status):
        return None
    headers = getattr(exc, "response").headers  # noqa: B009 (typed as Exception here)
    for name, scale in (("retry-after-ms", 0.001), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            seconds = float(value) * scale
        except ValueError:
            continue  # an HTTP date: fall back to our own backoff
        if seconds >= 0:
            return min(seconds, _MAX_RETRY_AFTER_S)
    return None


def describe(exc: BaseException, errors: SdkErrors) -> str:
    """A short, key-free description of an SDK error for a run's error text."""
    if isinstance(exc, errors.status):
        body = getattr(exc, "body", None)
        detail = _error_detail(body) or getattr(exc, "message", None) or "no detail"
        return f"HTTP {getattr(exc, 'status_code', '?')} ({str(detail)[:200]})"
    if isinstance(exc, errors.connection) and connect_failed(exc):
        return "connection refused or unreachable"
    return type(exc).__name__


def _error_detail(body: object) -> str | None:
    # Both APIs answer {"error": {"message": ...}} (Anthropic wraps it in {"type": "error", ...}).
    if isinstance(body, dict):
        inner = body.get("error", body)
        if isinstance(inner, dict) and isinstance(inner.get("message"), str):
            return str(inner["message"])
        if isinstance(inner, str):
            return inner
    return None


class _StopAtDeadline(stop_base):
    """Stop when the next attempt could not start with ``_MIN_ATTEMPT_S`` of the cap left."""

    def __init__(self, deadline: float) -> None:
        self._deadline = deadline

    def __call__(self, retry_state: RetryCallState) -> bool:
        return time.monotonic() + retry_state.upcoming_sleep + _MIN_ATTEMPT_S >= self._deadline


class _Backoff:
    """Exponential backoff with jitter, never shorter than the server's ``retry-after``."""

    def __init__(self, *, initial_s: float, max_s: float, errors: SdkErrors) -> None:
        self._exponential = wait_exponential_jitter(multiplier=initial_s, max=max_s, jitter=initial_s)
        self._errors = errors

    def __call__(self, retry_state: RetryCallState) -> float:
        delay = self._exponential(retry_state)
        outcome = retry_state.outcome
        retry_after = retry_after_s(outcome.exception() if outcome is not None else None, self._errors)
        return delay if retry_after is None else max(delay, retry_after)


@dataclass(frozen=True, slots=True)
class Backoff:
    """The retry backoff's shape: exponential from ``initial_s`` up to ``max_s`` seconds, with jitter."""

    initial_s: float = 0.5
    max_s: float = 8.0

    def __post_init__(self) -> None:
        if self.initial_s <= 0 or self.max_s < self.initial_s:
            raise ValueError("backoff_initial_s must be > 0 and backoff_max_s >= backoff_initial_s")


def within_cap(
    attempt: Callable[[float], T],
    *,
    guard: CallGuard,
    cap_s: float,
    errors: SdkErrors,
    backoff: Backoff,
    model: str,
) -> T:
    """Call ``attempt(seconds_left)`` until it returns, retrying only what was provably not processed.

    ``guard`` holds the deadline (the ``time.monotonic()`` at which the ``cap_s`` wall-clock cap
    ends) and closes the call's connections when it comes, however the server sends its bytes;
    ``attempt`` makes its requests through an HTTP client with the guard's event hooks.

    Raises:
        HarnessError: a timeout, a status that is not retried, a dropped connection, the call
            was given up, or the cap ran out while retrying (``retryable_exhausted``).
    """
    deadline = guard.deadline
    attempts = 0
    retrying = Retrying(
        # stop_before_delay is the budget measured from the first attempt; _StopAtDeadline also
        # counts the client's set-up and keeps a usable slice of the cap for the next attempt.
        stop=stop_before_delay(cap_s) | _StopAtDeadline(deadline),
        wait=_Backoff(initial_s=backoff.initial_s, max_s=backoff.max_s, errors=errors),
        retry=retry_if_exception(lambda exc: not guard.cut and is_retryable(exc, errors)),
        reraise=True,
        before_sleep=_retry_logger(errors, model),
    )
    try:
        for try_ in retrying:
            with try_:
                attempts += 1
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise HarnessError(
                        f"the {cap_s:g} s wall-clock cap ran out before attempt {attempts} could start",
                        retryable_exhausted=attempts > 1,
                    )
                return attempt(remaining)
    except HarnessError:
        raise
    except (errors.base, OSError, ResponseTooLarge) as exc:
        # OSError: the SDK's parser read a socket the guard had shut, the same cut seen one layer down;
        # ResponseTooLarge: the guard's bound, raised inside the HTTP client (one SDK wraps it, the other not).
        if isinstance(exc, errors.base) or guard.cut:
            raise _translated(exc, guard, errors, cap_s=cap_s, model=model, attempts=attempts) from exc
        raise
    raise AssertionError("unreachable: tenacity either returns or raises")  # pragma: no cover


def _translated(
    exc: BaseException, guard: CallGuard, errors: SdkErrors, *, cap_s: float, model: str, attempts: int
) -> HarnessError:
    """The run's error for what ended the call: given up, the cap, or the SDK's own failure."""
    if isinstance(exc, errors.status):  # a whole response arrived, whatever the guard did after it
        return _failure(exc, errors, cap_s=cap_s, attempts=attempts)
    if guard.given_up is not None:
        return HarnessError(f"the model call was given up: {guard.given_up}")
    if guard.oversize:
        return HarnessError(
            f"the model server's answer was over {guard.max_response_bytes:,} bytes, so the connection was closed "
            f"and nothing of it was used (model {model}); lower max_output_tokens or check the server"
        )
    if guard.expired or isinstance(exc, errors.timeout):
        how = "the answer was not complete when the cap ended, so the connection was closed" if guard.expired else (
            "no response within the cap")  # fmt: skip
        return HarnessError(
            f"the model call timed out: {how} ({cap_s:g} s wall-clock cap, model {model}, attempt {attempts}); "
            "raise wall_clock_cap_s if this repeats"
        )
    assert isinstance(exc, Exception)
    return _failure(exc, errors, cap_s=cap_s, attempts=attempts)


def _retry_logger(errors: SdkErrors, model: str) -> Callable[[RetryCallState], None]:
    """Log each retry (the service, the model, the attempt, why, and the wait); never a body or a key."""

    def log_retry(state: RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        log.info(
            "%s call model=%s attempt=%d failed retryably (%s); retrying in %.2f s",
            errors.service,
            model,
            state.attempt_number,
            describe(exc, errors) if exc is not None else "?",
            state.upcoming_sleep,
        )

    return log_retry


def _failure(exc: Exception, errors: SdkErrors, *, cap_s: float, attempts: int) -> HarnessError:
    if is_retryable(exc, errors):
        return HarnessError(
            f"{errors.service} was still unavailable ({describe(exc, errors)}) when the {cap_s:g} s wall-clock cap "
            f"ran out after {attempts} attempt(s); `memledger runs retry <run id>` re-queues the run",
            retryable_exhausted=True,
        )
    if isinstance(exc, errors.status):
        return HarnessError(f"{errors.service} answered {describe(exc, errors)}; not retried")
    if isinstance(exc, errors.connection):
        cause = type(exc.__cause__).__name__ if exc.__cause__ is not None else "connection error"
        return HarnessError(
            f"the connection to {errors.service} broke after it was established ({cause}); not retried, "
            "because the request may have been processed"
        )
    return HarnessError(f"the SDK failed: {exc}")
