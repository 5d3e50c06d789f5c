"""/healthz, /readyz and /metrics: plain Django views outside the API (no session, no throttle)."""

from __future__ import annotations

import hmac
import ipaddress
import os

from django.conf import settings
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, REGISTRY, CollectorRegistry, generate_latest, multiprocess

from ops.collector import MarketCollector
from ops.health import readiness


@never_cache
@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    """The process answers; it asks nothing else (a load balancer's liveness probe)."""
    return JsonResponse({"status": "ok"})


@never_cache
@require_GET
def readyz(request: HttpRequest) -> JsonResponse:
    checks = readiness()
    ready = all(c.ok for c in checks.values())
    body = {
        "status": "ready" if ready else "not ready",
        "failing": [name for name, c in checks.items() if not c.ok],
        "checks": {name: {"ok": c.ok, "detail": c.detail} for name, c in checks.items()},
    }
    return JsonResponse(body, status=200 if ready else 503)


def _allowed(request: HttpRequest) -> bool:
    """A matching `Authorization: Bearer METRICS_TOKEN`, or a client address in METRICS_ALLOW_FROM."""
    token = settings.METRICS_TOKEN
    header = request.headers.get("Authorization", "")
    if (
        token
        and header.startswith("Bearer ")
        and hmac.compare_digest(header[7:].strip().encode(), token.encode())
    ):
        return True
    try:
        client = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        return False
    return any(client in network for network in settings.METRICS_ALLOW_FROM)


def _process_registry() -> CollectorRegistry:
    """Every gunicorn (and co-located Celery) process's values in multiprocess mode, else this process's."""
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        return REGISTRY
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry)
    return registry


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    if not _allowed(request):
        response = JsonResponse(
            {
                "error": "forbidden",
                "detail": "Send Authorization: Bearer METRICS_TOKEN, or scrape from METRICS_ALLOW_FROM.",
            },
            status=403,
        )
        response["WWW-Authenticate"] = "Bearer"
        return response
    market = CollectorRegistry(auto_describe=False)
    market.register(MarketCollector())
    body = generate_latest(_process_registry()) + generate_latest(market)
    return HttpResponse(body, content_type=CONTENT_TYPE_LATEST)
