"""Policy, price and round routes (mounted under /api/v1/)."""

from django.urls import path

from market.api import hold_policy, policy, prices, rounds, shadow

urlpatterns = [
    path("policy", policy.MarketPolicyView.as_view(), name="market-policy"),
    path("tenants/<slug:slug>/policy", policy.TenantPolicyView.as_view(), name="tenant-policy"),
    path("tenants/<slug:slug>/hold-policy", hold_policy.HoldPolicyView.as_view(), name="hold-policy"),
    path("prices", prices.PriceBoardView.as_view(), name="price-board"),
    path("prices/history", prices.PriceHistoryView.as_view(), name="price-history"),
    path("rounds", rounds.RoundListView.as_view(), name="round-list"),
    path("rounds/<int:round_id>", rounds.RoundDetailView.as_view(), name="round-detail"),
    path("policy/versions/<int:version_id>/shadow", shadow.ShadowView.as_view(), name="shadow"),
    path(
        "policy/versions/<int:version_id>/shadow/start", shadow.ShadowStartView.as_view(), name="shadow-start"
    ),
    path("policy/versions/<int:version_id>/shadow/stop", shadow.ShadowStopView.as_view(), name="shadow-stop"),
    path(
        "policy/versions/<int:version_id>/shadow/rounds",
        shadow.ShadowRoundsView.as_view(),
        name="shadow-rounds",
    ),
]
