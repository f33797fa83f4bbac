"""When :class:`~neotoma_agent.HttpTransport` retries, and how long it waits: the policy.

Every request it sends is safe to resend (reads, or writes under a deterministic key), so
what decides a retry is the failure alone: :func:`is_transient`.
"""

from __future__ import annotations

import random

import attrs

from neotoma_agent._records.checks import (
    check_non_negative,
    check_positive,
    check_positive_int,
    validator,
)
from neotoma_agent.exceptions import APIError, NeotomaError, RateLimitedError, TransportError

__all__ = ["RetryPolicy", "is_transient"]

#: statuses a gateway or an overloaded server sends while the store itself is fine
_RETRY_STATUSES = frozenset({429, 502, 503, 504})


@attrs.frozen
class RetryPolicy:
    """How :class:`HttpTransport` retries a transient failure.

    The wait before retry *n* (1-based) is drawn uniformly from
    ``[0, min(wait_max, wait_initial * wait_exp_base ** (n - 1))]`` ("full jitter", so that
    many clients failing together do not retry together), unless the server sent
    ``Retry-After``, which is honoured as given. No request is retried more than
    ``attempts - 1`` times, and the whole call (attempts and waits) ends within ``timeout``
    seconds: a ``Retry-After`` beyond what is left is not waited for; the 429 is raised
    with its ``retry_after`` so the caller can decide.

    ``backoff=False`` is the testing switch: failures are still retried, without waiting.
    """

    #: total attempts, the first included (1 disables retries)
    attempts: int = attrs.field(default=4, validator=validator(check_positive_int))
    #: seconds for the whole call, attempts and waits included
    timeout: float = attrs.field(default=60.0, validator=validator(check_positive))
    wait_initial: float = attrs.field(default=0.2, validator=validator(check_non_negative))
    wait_max: float = attrs.field(default=5.0, validator=validator(check_non_negative))
    wait_exp_base: float = attrs.field(default=2.0, validator=validator(check_positive))
    backoff: bool = True

    @classmethod
    def no_retries(cls) -> RetryPolicy:
        """A policy that makes exactly one attempt."""
        return cls(attempts=1)

    def wait(self, retry_number: int, retry_after: float | None = None) -> float:
        """Seconds to sleep before retry ``retry_number`` (1-based)."""
        if not self.backoff:
            return 0.0
        if retry_after is not None:
            return retry_after
        try:
            cap = min(self.wait_max, self.wait_initial * self.wait_exp_base ** (retry_number - 1))
        except OverflowError:
            cap = self.wait_max
        # Not cryptographic: only decorrelates clients that failed at the same moment.
        return random.uniform(0.0, cap)


def is_transient(error: NeotomaError) -> bool:
    """Whether the same request, unchanged, may succeed later."""
    if isinstance(error, TransportError):
        return True
    if isinstance(error, RateLimitedError):
        return True
    if isinstance(error, APIError):
        # `retryable: true` (a policy service briefly down) counts on server errors only:
        # a 4xx other than 429 means this exact request is wrong and must not be resent.
        return error.status in _RETRY_STATUSES or (error.retryable and error.status >= 500)
    return False
