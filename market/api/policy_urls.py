"""Policy, price and round routes (mounted under /api/v1/)."""

from django.urls import path

from market.api import hold_policy, policy, prices, rounds

urlpatterns = [
    path("policy", policy.MarketPolicyView.as_view(), name="market-policy"),
    path("tenants/<slug:slug>/policy", policy.TenantPolicyView.as_view(), name="tenant-policy"),
    path("tenants/<slug:slug>/hold-policy", hold_policy.HoldPolicyView.as_view(), name="hold-policy"),
    path("prices", prices.PriceBoardView.as_view(), name="price-board"),
    path("prices/history", prices.PriceHistoryView.as_view(), name="price-history"),
    path("rounds", rounds.RoundListView.as_view(), name="round-list"),
    path("rounds/<int:round_id>", rounds.RoundDetailView.as_view(), name="round-detail"),
]
