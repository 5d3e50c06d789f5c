from django.contrib.auth import views as auth_views
from django.urls import path, reverse_lazy

from frontend.views import (
    alerts,
    auth,
    console_audit,
    console_market,
    console_nodes,
    console_tenants,
    console_whatif,
    holds,
    jobs,
    portal,
    spend,
    tokens,
)

app_name = "frontend"
urlpatterns = [
    path("", auth.home, name="home"),
    path("login/", auth_views.LoginView.as_view(template_name="frontend/login.html"), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path(
        "password/",
        auth_views.PasswordChangeView.as_view(
            template_name="frontend/password.html", success_url=reverse_lazy("frontend:password_done")
        ),
        name="password",
    ),
    path(
        "password/done/",
        auth_views.PasswordChangeDoneView.as_view(template_name="frontend/password_done.html"),
        name="password_done",
    ),
    path("switch/", auth.switch, name="switch"),
    path("t/<slug:slug>/", portal.dashboard, name="dashboard"),
    path("t/<slug:slug>/jobs/", jobs.jobs, name="jobs"),
    path("t/<slug:slug>/jobs/new/", jobs.submit, name="submit"),
    path("t/<slug:slug>/jobs/guidance/", jobs.guidance, name="guidance"),
    path("t/<slug:slug>/jobs/estimate/", jobs.estimate, name="estimate"),
    path("t/<slug:slug>/jobs/<int:job_id>/", jobs.job, name="job"),
    path("t/<slug:slug>/jobs/<int:job_id>/amend/", jobs.amend, name="amend"),
    path("t/<slug:slug>/jobs/<int:job_id>/cancel/", jobs.cancel, name="cancel"),
    path("t/<slug:slug>/spend/", spend.spend, name="spend"),
    path("t/<slug:slug>/spend.csv", spend.spend_csv, name="spend_csv"),
    path("t/<slug:slug>/tokens/", tokens.tokens, name="tokens"),
    path("t/<slug:slug>/holds/", holds.holds, name="holds"),
    path("t/<slug:slug>/alerts/", alerts.alerts, name="alerts"),
    path("t/<slug:slug>/alerts/<int:rule_id>/lift/", alerts.alert_lift, name="alert_lift"),
    path("t/<slug:slug>/alerts/<int:rule_id>/delete/", alerts.alert_delete, name="alert_delete"),
    path("t/<slug:slug>/tokens/<int:token_id>/revoke/", tokens.token_revoke_view, name="token_revoke"),
    path("console/", console_market.console, name="console"),
    path("console/tenants/", console_tenants.tenants, name="console_tenants"),
    path("console/tenants/<slug:slug>/", console_tenants.tenant, name="console_tenant"),
    path("console/fairness/", console_market.fairness, name="console_fairness"),
    path("console/market/", console_market.market, name="console_market"),
    path("console/nodes/", console_nodes.nodes, name="console_nodes"),
    path("console/nodes/bootstrap-token/", console_nodes.bootstrap_token, name="console_bootstrap_token"),
    path("console/nodes/<str:name>/<slug:action>/", console_nodes.node_action, name="console_node_action"),
    path("console/rounds/", console_market.rounds, name="console_rounds"),
    path("console/rounds/<int:round_id>/", console_market.round_detail, name="console_round"),
    path("console/audit/", console_audit.audit, name="console_audit"),
    path("console/audit.csv", console_audit.audit_csv, name="console_audit_csv"),
    path("console/whatif/", console_whatif.whatif, name="console_whatif"),
    path("console/whatif/<int:run_id>/", console_whatif.whatif_run, name="console_whatif_run"),
    path("console/whatif/<int:run_id>/status", console_whatif.whatif_status, name="console_whatif_status"),
    path("console/whatif/<int:run_id>/apply/", console_whatif.whatif_apply_view, name="console_whatif_apply"),
    path(
        "console/whatif/<int:run_id>/<slug:name>.png", console_whatif.whatif_plot, name="console_whatif_plot"
    ),
]
