from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.http import HttpResponse
from django.urls import include, path
from django.views.defaults import bad_request, page_not_found, permission_denied, server_error
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerView

from config import api

api_v1 = [
    path("", include("accounts.urls")),
    path("", include("market.urls")),
    path("", include("nodeagent.urls")),
]

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="api-docs"),
    path("api/v1/", include(api_v1)),
    path("", include("ops.urls")),
    path("", include("frontend.urls")),
]


def handler404(request: Any, exception: Exception | None = None) -> HttpResponse:
    if request.path.startswith("/api/"):
        return api.json_404(request, exception)
    return page_not_found(request, exception)


def handler400(request: Any, exception: Exception) -> HttpResponse:  # Django always passes the exception
    if request.path.startswith("/api/"):
        return api.json_400(request, exception)
    return bad_request(request, exception)


def handler403(request: Any, exception: Exception) -> HttpResponse:  # Django always passes the exception
    if request.path.startswith("/api/"):
        return api.json_403(request, exception)
    return permission_denied(request, exception)


def handler500(request: Any) -> HttpResponse:
    if request.path.startswith("/api/"):
        return api.json_500(request)
    return server_error(request)
