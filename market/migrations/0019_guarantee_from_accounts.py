# Guarantee moves from accounts to market (issue 26): it is market policy, and from accounts its key to
# inventory.GpuType pointed up the layers. State only: the table accounts_guarantee, its rows, its constraint
# (guarantee_unique) and indexes stay; the model names it through Meta.db_table.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0003_guarantee_inventory_gputype'),
        ('inventory', '0001_initial'),
        ('market', '0018_inventory_delete_gputype'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.CreateModel(
                    name='Guarantee',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('gpus', models.PositiveIntegerField()),
                        ('gpu_type', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='guarantees', to='inventory.gputype')),
                        ('tenant', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='guarantees', to='accounts.tenant')),
                    ],
                    options={
                        'db_table': 'accounts_guarantee',
                        'constraints': [models.UniqueConstraint(fields=('tenant', 'gpu_type'), name='guarantee_unique')],
                    },
                ),
            ],
        ),
    ]
