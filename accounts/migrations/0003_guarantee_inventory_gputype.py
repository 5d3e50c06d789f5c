# The inventory carve-out (issue 26): Guarantee.gpu_type now names inventory.GpuType, the same table
# (market_gputype) under its new app. State only: the column and its foreign key constraint are unchanged.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0002_tenant_guardrail'),
        ('inventory', '0001_initial'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.AlterField(
                    model_name='guarantee',
                    name='gpu_type',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='guarantees', to='inventory.gputype'),
                ),
            ],
        ),
    ]
