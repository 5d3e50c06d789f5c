# The inventory carve-out (issue 26): the market's keys to GPU types, nodes and GPUs now name the inventory
# models, the same tables under their new app. State only: no column, constraint or index changes.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('inventory', '0001_initial'),
        ('market', '0016_shadow_rounds'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.AlterField(
                    model_name='fairshareusage',
                    name='gpu_type',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='inventory.gputype'),
                ),
                migrations.AlterField(
                    model_name='roundprice',
                    name='gpu_type',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='round_prices', to='inventory.gputype'),
                ),
                migrations.AlterField(
                    model_name='bidoutcome',
                    name='gpu_type',
                    field=models.ForeignKey(blank=True, db_constraint=False, db_index=False, null=True, on_delete=django.db.models.deletion.PROTECT, related_name='+', to='inventory.gputype'),
                ),
                migrations.AlterField(
                    model_name='lease',
                    name='gpu_type',
                    field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='leases', to='inventory.gputype'),
                ),
                migrations.AlterField(
                    model_name='fairshareround',
                    name='gpu_type',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='inventory.gputype'),
                ),
                migrations.AlterField(
                    model_name='command',
                    name='node',
                    field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='commands', to='inventory.node'),
                ),
                migrations.AlterField(
                    model_name='lease',
                    name='node',
                    field=models.ForeignKey(db_constraint=False, db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='leases', to='inventory.node'),
                ),
                migrations.AlterField(
                    model_name='leasegpu',
                    name='gpu',
                    field=models.ForeignKey(db_constraint=False, on_delete=django.db.models.deletion.PROTECT, related_name='lease_gpus', to='inventory.gpu'),
                ),
            ],
        ),
    ]
