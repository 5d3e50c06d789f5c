"""Agent and node-admin routes (mounted under /api/v1/)."""

from django.urls import path

from nodeagent.api import admin, agent

urlpatterns = [
    path("agent/register", agent.RegisterView.as_view(), name="agent-register"),
    path("agent/heartbeat", agent.HeartbeatView.as_view(), name="agent-heartbeat"),
    path("agent/report", agent.ReportView.as_view(), name="agent-report"),
    path("agent/commands", agent.CommandsView.as_view(), name="agent-commands"),
    path("agent/commands/<int:command_id>/ack", agent.AckView.as_view(), name="agent-ack"),
    path("agent/usage", agent.UsageView.as_view(), name="agent-usage"),
    path("agent/leases/<int:lease_id>/started", agent.LeaseStartedView.as_view(), name="agent-started"),
    path("agent/leases/<int:lease_id>/exited", agent.LeaseExitedView.as_view(), name="agent-exited"),
    path("nodes", admin.NodeListView.as_view(), name="node-list"),
    path("nodes/bootstrap-tokens", admin.BootstrapTokenView.as_view(), name="node-bootstrap-tokens"),
    path("nodes/<str:name>", admin.NodeDetailView.as_view(), name="node-detail"),
    path("nodes/<str:name>/drain", admin.NodeDrainView.as_view(), name="node-drain"),
    path("nodes/<str:name>/resume", admin.NodeResumeView.as_view(), name="node-resume"),
    path("nodes/<str:name>/retire", admin.NodeRetireView.as_view(), name="node-retire"),
]
