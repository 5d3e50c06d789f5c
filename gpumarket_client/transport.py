"""HTTP to the API: bearer token, timeouts, retries with backoff, and one Idempotency-Key per write reused by
every retry of it, so a request whose answer was lost on the way is never carried out twice."""

from __future__ import annotations

import time
import uuid
from typing import Any

import httpx

from gpumarket_client.errors import ApiError, ConnectionFailed

TIMEOUT = httpx.Timeout(30.0, connect=5.0)
RETRIES = 4  # attempts after the first
BACKOFF_S = 0.5  # doubled each retry: 0.5, 1, 2, 4 s
RETRY_STATUSES = {429, 502, 503, 504}  # the server (or its proxy) said: try again
USER_AGENT = "gpumarket-client/0.1"


def new_idempotency_key() -> str:
    return f"gpumarket-cli:{uuid.uuid4().hex}"


class Transport:
    def __init__(
        self, url: str, token: str, *, timeout: httpx.Timeout = TIMEOUT, retries: int = RETRIES
    ) -> None:
        self.url = url.rstrip("/")
        self.retries = retries
        self.http = httpx.Client(
            base_url=f"{self.url}/api/v1/",
            headers={
                "Authorization": f"Bearer {token}",
                "User-Agent": USER_AGENT,
                "Accept": "application/json",
            },
            timeout=timeout,
        )

    def close(self) -> None:
        self.http.close()

    def get(self, path: str, params: dict[str, Any] | None = None) -> Any:
        return self._send("GET", path, params=params)

    def post(
        self, path: str, body: Any = None, *, idempotency_key: str | None = None, write: bool = True
    ) -> Any:
        """A write gets an Idempotency-Key (the given one, else a new one) that every retry repeats."""
        headers = {"Idempotency-Key": idempotency_key or new_idempotency_key()} if write else {}
        return self._send("POST", path, json=body if body is not None else {}, headers=headers)

    def _send(self, method: str, path: str, **kwargs: Any) -> Any:
        attempt = 0
        while True:
            wait: float | None = None
            try:
                response = self.http.request(method, path.lstrip("/"), **kwargs)
            except httpx.HTTPError as exc:
                if attempt >= self.retries:
                    raise ConnectionFailed(f"{self.url}: cannot reach the server ({_why(exc)})") from None
            else:
                if response.status_code not in RETRY_STATUSES or attempt >= self.retries:
                    return _body(response)
                wait = _retry_after(response)
            time.sleep(wait if wait is not None else BACKOFF_S * 2**attempt)
            attempt += 1

    def __enter__(self) -> Transport:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _why(exc: httpx.HTTPError) -> str:
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0]


def _retry_after(response: httpx.Response) -> float | None:
    try:
        return min(float(response.headers.get("Retry-After", "")), 30.0)
    except ValueError:
        return None


def _body(response: httpx.Response) -> Any:
    try:
        body = response.json() if response.content else None
    except ValueError:
        body = None
    if response.is_success:
        return body
    if body is None and response.status_code >= 500:
        raise ConnectionFailed(f"{response.url.host}: the server failed (HTTP {response.status_code})")
    raise ApiError.from_response(response.status_code, body)
