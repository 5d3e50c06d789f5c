"""Job and bid routes (mounted under /api/v1/)."""

from django.urls import URLPattern, path

from market.api import estimate, jobs

urlpatterns: list[URLPattern] = [
    path("tenants/<slug:slug>/jobs", jobs.JobListView.as_view(), name="job-list"),
    path("tenants/<slug:slug>/jobs/estimate", estimate.JobEstimateView.as_view(), name="job-estimate"),
    path("tenants/<slug:slug>/jobs/<int:job_id>", jobs.JobDetailView.as_view(), name="job-detail"),
    path("tenants/<slug:slug>/jobs/<int:job_id>/bid", jobs.BidAmendView.as_view(), name="job-bid"),
    path("tenants/<slug:slug>/jobs/<int:job_id>/cancel", jobs.JobCancelView.as_view(), name="job-cancel"),
]
