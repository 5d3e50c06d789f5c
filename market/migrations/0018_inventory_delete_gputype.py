# The inventory carve-out (issue 26): GpuType leaves the market's state once nothing names market.GpuType any
# more (accounts' guarantees, the agent server's nodes and tokens, the market's own keys). State only: its
# table, market_gputype, is inventory.GpuType's now and must stay.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0003_guarantee_inventory_gputype'),
        ('market', '0017_inventory_repoint'),
        ('nodeagent', '0003_inventory_repoint'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.DeleteModel(
                    name='GpuType',
                ),
            ],
        ),
    ]
