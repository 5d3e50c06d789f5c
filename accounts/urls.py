from django.urls import path

from accounts import api, audit_api
from accounts.sso.api import OidcTokenView

urlpatterns = [
    path("auth/oidc/token", OidcTokenView.as_view(), name="oidc-token"),
    path("me", api.MeView.as_view(), name="me"),
    path("audit", audit_api.AuditView.as_view(), name="audit-events"),
    path("tenants/<slug:slug>/tokens", api.TokenListView.as_view(), name="token-list"),
    path("tenants/<slug:slug>/tokens/<int:token_id>", api.TokenDetailView.as_view(), name="token-detail"),
]
