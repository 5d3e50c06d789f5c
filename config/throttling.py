"""The per-user API rate limit on atomic Redis counters (config/ratelimit.py)."""

from __future__ import annotations

from typing import Any

from rest_framework.throttling import UserRateThrottle

from config import ratelimit


class AtomicUserRateThrottle(UserRateThrottle):
    """API_THROTTLE_USER requests per window per user (per address for anonymous callers), counted with one
    atomic INCR per request, so concurrent clients cannot overshoot the rate."""

    # Set by SimpleRateThrottle.__init__ from the rate; the stubs leave them out.
    num_requests: int
    duration: int

    def allow_request(self, request: Any, view: Any) -> bool:
        if self.rate is None:
            return True
        user = request.user
        ident = f"user:{user.pk}" if user and user.is_authenticated else f"ip:{self.get_ident(request)}"
        self.window = int(self.duration)
        return ratelimit.hit(f"throttle:{ident}", self.window) <= self.num_requests

    def wait(self) -> float | None:
        return float(ratelimit.seconds_left(self.window))
