# The inventory carve-out (issue 26): Node and Gpu leave the agent server's state for inventory's, and the
# agent server's own keys (tokens, usage marks, reports, lease usage) name inventory.Node and
# inventory.GpuType. State only: the tables nodeagent_node and nodeagent_gpu stay, with every row, constraint
# and index. After market 0015, so that no market key names nodeagent.Node when it goes.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('inventory', '0001_initial'),
        ('market', '0017_inventory_repoint'),
        ('nodeagent', '0002_agent_credentials_usage'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.AlterField(
                    model_name='usagereport',
                    name='node',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='inventory.node'),
                ),
                migrations.AlterField(
                    model_name='leaseusage',
                    name='node',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='inventory.node'),
                ),
                migrations.AlterField(
                    model_name='bootstraptoken',
                    name='node',
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='inventory.node'),
                ),
                migrations.AlterField(
                    model_name='usagemark',
                    name='node',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='inventory.node'),
                ),
                migrations.AlterField(
                    model_name='bootstraptoken',
                    name='gpu_type',
                    field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.PROTECT, to='inventory.gputype'),
                ),
                migrations.DeleteModel(
                    name='Gpu',
                ),
                migrations.DeleteModel(
                    name='Node',
                ),
            ],
        ),
    ]
