# Measured usage moves from nodeagent to market (issue 26): UsageReport and LeaseUsage leave the agent server's
# state once market 0022 holds them. State only: their tables (nodeagent_usagereport, nodeagent_leaseusage)
# are the market models' now and must stay. Nothing keys to either model, so no key needs re-pointing.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('market', '0022_usage_from_nodeagent'),
        ('nodeagent', '0003_inventory_repoint'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.DeleteModel(
                    name='LeaseUsage',
                ),
                migrations.DeleteModel(
                    name='UsageReport',
                ),
            ],
        ),
    ]
