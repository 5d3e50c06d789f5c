"""Policy, price and round routes (mounted under /api/v1/)."""

from django.urls import path

from market.api import hold_policy, policy, policy_versions, prices, rounds, shadow

urlpatterns = [
    path("policy", policy.MarketPolicyView.as_view(), name="market-policy"),
    path("policy/versions", policy_versions.VersionListView.as_view(), name="policy-versions"),
    path("policy/versions/<int:number>", policy_versions.VersionDetailView.as_view(), name="policy-version"),
    path(
        "policy/versions/<int:number>/revert",
        policy_versions.RevertView.as_view(),
        name="policy-version-revert",
    ),
    path("policy/canaries", policy_versions.CanaryListView.as_view(), name="policy-canaries"),
    path("policy/canaries/<int:canary_id>", policy_versions.CanaryDetailView.as_view(), name="policy-canary"),
    path(
        "policy/canaries/<int:canary_id>/promote",
        policy_versions.CanaryPromoteView.as_view(),
        name="policy-canary-promote",
    ),
    path(
        "policy/canaries/<int:canary_id>/end",
        policy_versions.CanaryEndView.as_view(),
        name="policy-canary-end",
    ),
    path("tenants/<slug:slug>/policy", policy.TenantPolicyView.as_view(), name="tenant-policy"),
    path("tenants/<slug:slug>/hold-policy", hold_policy.HoldPolicyView.as_view(), name="hold-policy"),
    path("prices", prices.PriceBoardView.as_view(), name="price-board"),
    path("prices/history", prices.PriceHistoryView.as_view(), name="price-history"),
    path("rounds", rounds.RoundListView.as_view(), name="round-list"),
    path("rounds/<int:round_id>", rounds.RoundDetailView.as_view(), name="round-detail"),
    path("policy/versions/<int:number>/shadow", shadow.ShadowView.as_view(), name="shadow"),
    path("policy/versions/<int:number>/shadow/start", shadow.ShadowStartView.as_view(), name="shadow-start"),
    path("policy/versions/<int:number>/shadow/stop", shadow.ShadowStopView.as_view(), name="shadow-stop"),
    path(
        "policy/versions/<int:number>/shadow/rounds",
        shadow.ShadowRoundsView.as_view(),
        name="shadow-rounds",
    ),
]
