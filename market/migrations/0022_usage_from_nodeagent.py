# Measured usage moves from nodeagent to market (issue 26, docs/architecture.md): settlement bills from it,
# jobs show it, retention prunes it and what-if replays it, so reading it from nodeagent pointed up the layers.
# State only: the tables nodeagent_usagereport and nodeagent_leaseusage, their rows, constraints
# (usage_report_node_epoch_seq, lease_usage_lease_node) and indexes stay as nodeagent 0002 made them; the
# models name them through Meta.db_table. Depending on nodeagent 0003 puts the tables in place first on an
# empty database. UsageMark stays nodeagent's: only the ingestion reads it.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('inventory', '0002_content_types'),
        ('market', '0021_spend_alerts'),
        ('nodeagent', '0003_inventory_repoint'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.CreateModel(
                    name='UsageReport',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('boot_epoch', models.PositiveIntegerField()),
                        ('seq', models.PositiveBigIntegerField()),
                        ('sent_at', models.DateTimeField()),
                        ('received_at', models.DateTimeField()),
                        ('samples', models.JSONField(help_text='[{uuid, at, healthy, util_pct, mem_used_mb, power_w, energy_j, processes}]')),
                        ('node', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='inventory.node')),
                    ],
                    options={
                        'db_table': 'nodeagent_usagereport',
                        'constraints': [models.UniqueConstraint(fields=('node', 'boot_epoch', 'seq'), name='usage_report_node_epoch_seq')],
                    },
                ),
                migrations.CreateModel(
                    name='LeaseUsage',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('gpu_seconds', models.FloatField(default=0)),
                        ('energy_j', models.FloatField(default=0)),
                        ('util_avg', models.FloatField(default=0)),
                        ('util_max', models.FloatField(default=0)),
                        ('mem_avg_mb', models.FloatField(default=0)),
                        ('mem_max_mb', models.FloatField(default=0)),
                        ('samples', models.PositiveBigIntegerField(default=0)),
                        ('log_tail', models.TextField(blank=True)),
                        ('idle_since', models.DateTimeField(blank=True, null=True)),
                        ('exit_code', models.IntegerField(blank=True, null=True)),
                        ('exited_at', models.DateTimeField(blank=True, null=True)),
                        ('updated_at', models.DateTimeField(auto_now=True)),
                        ('lease', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='usage', to='market.lease')),
                        ('node', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='inventory.node')),
                    ],
                    options={
                        'db_table': 'nodeagent_leaseusage',
                        'constraints': [models.UniqueConstraint(fields=('lease', 'node'), name='lease_usage_lease_node')],
                    },
                ),
            ],
        ),
    ]
