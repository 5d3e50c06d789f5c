"""Market API routes (mounted under /api/v1/)."""

from django.urls import include, path

from market.api import gpu_types, ledger, spend, spend_alerts

urlpatterns = [
    path("gpu-types", gpu_types.GpuTypeListView.as_view(), name="gpu-type-list"),
    path("gpu-types/<str:name>", gpu_types.GpuTypeDetailView.as_view(), name="gpu-type-detail"),
    path("tenants/<slug:slug>/balance", ledger.BalanceView.as_view(), name="ledger-balance"),
    path("tenants/<slug:slug>/ledger", ledger.LedgerView.as_view(), name="ledger-entries"),
    path("tenants/<slug:slug>/topups", ledger.TopupView.as_view(), name="ledger-topups"),
    path("tenants/<slug:slug>/refunds", ledger.RefundView.as_view(), name="ledger-refunds"),
    path("tenants/<slug:slug>/spend", spend.SpendView.as_view(), name="spend"),
    path("tenants/<slug:slug>/spend-alerts", spend_alerts.RuleListView.as_view(), name="spend-alert-list"),
    path(
        "tenants/<slug:slug>/spend-alerts/<int:rule_id>",
        spend_alerts.RuleDetailView.as_view(),
        name="spend-alert-detail",
    ),
    path(
        "tenants/<slug:slug>/spend-alerts/<int:rule_id>/lift",
        spend_alerts.RuleLiftView.as_view(),
        name="spend-alert-lift",
    ),
    path(
        "tenants/<slug:slug>/spend-alerts/<int:rule_id>/deliveries",
        spend_alerts.DeliveryListView.as_view(),
        name="spend-alert-deliveries",
    ),
    path("", include("market.api.jobs_urls")),
    path("", include("market.api.policy_urls")),
]
