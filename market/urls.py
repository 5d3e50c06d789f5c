"""Market API routes (mounted under /api/v1/)."""

from django.urls import include, path

from market.api import gpu_types, ledger

urlpatterns = [
    path("gpu-types", gpu_types.GpuTypeListView.as_view(), name="gpu-type-list"),
    path("gpu-types/<str:name>", gpu_types.GpuTypeDetailView.as_view(), name="gpu-type-detail"),
    path("tenants/<slug:slug>/balance", ledger.BalanceView.as_view(), name="ledger-balance"),
    path("tenants/<slug:slug>/ledger", ledger.LedgerView.as_view(), name="ledger-entries"),
    path("tenants/<slug:slug>/topups", ledger.TopupView.as_view(), name="ledger-topups"),
    path("tenants/<slug:slug>/refunds", ledger.RefundView.as_view(), name="ledger-refunds"),
    path("", include("market.api.jobs_urls")),
    path("", include("market.api.policy_urls")),
]
