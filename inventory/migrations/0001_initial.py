# The inventory carve-out (issue 26, docs/architecture.md): GpuType leaves market, Node and Gpu leave nodeagent.
# State only: the tables (market_gputype, nodeagent_node, nodeagent_gpu), their constraints and indexes stay as
# the earlier market and nodeagent migrations made them; the models name them through Meta.db_table. Depending
# on those apps' last pre-move migrations puts the tables in place first on an empty database.

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('market', '0014_merge_fair_share_lease_checkpoint'),
        ('nodeagent', '0002_agent_credentials_usage'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.CreateModel(
                    name='GpuType',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.CharField(max_length=64, unique=True)),
                        ('memory_gb', models.PositiveIntegerField()),
                        ('reserve_price', models.BigIntegerField(help_text='Lowest price per GPU-hour, micro-credits.')),
                        ('max_price', models.BigIntegerField(help_text='Highest posted price per GPU-hour, micro-credits.')),
                        ('posted_price', models.BigIntegerField(blank=True, editable=False, null=True)),
                    ],
                    options={
                        'db_table': 'market_gputype',
                        'ordering': ['name'],
                        'constraints': [models.CheckConstraint(condition=models.Q(('reserve_price__gte', 0)), name='gputype_reserve_nonnegative'), models.CheckConstraint(condition=models.Q(('max_price__gte', models.F('reserve_price'))), name='gputype_max_ge_reserve')],
                    },
                ),
                migrations.CreateModel(
                    name='Node',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.CharField(max_length=128, unique=True)),
                        ('topology_domain', models.CharField(default='default', max_length=64)),
                        ('state', models.CharField(choices=[('up', 'Up'), ('down', 'Down'), ('draining', 'Draining'), ('retired', 'Retired')], default='up', max_length=16)),
                        ('created_at', models.DateTimeField(auto_now_add=True)),
                        ('credential_digest', models.CharField(blank=True, db_index=True, max_length=64)),
                        ('agent_version', models.CharField(blank=True, max_length=64)),
                        ('boot_epoch', models.PositiveIntegerField(default=0)),
                        ('last_heartbeat', models.DateTimeField(blank=True, null=True)),
                        ('down_since', models.DateTimeField(blank=True, null=True)),
                        ('drained_at', models.DateTimeField(blank=True, null=True)),
                        ('retired_at', models.DateTimeField(blank=True, null=True)),
                        ('gpu_type', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='nodes', to='inventory.gputype')),
                    ],
                    options={
                        'db_table': 'nodeagent_node',
                        'ordering': ['name'],
                    },
                ),
                migrations.CreateModel(
                    name='Gpu',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('index', models.PositiveSmallIntegerField()),
                        ('uuid', models.CharField(max_length=96, unique=True)),
                        ('model', models.CharField(blank=True, max_length=128)),
                        ('memory_mb', models.PositiveIntegerField(default=0)),
                        ('healthy', models.BooleanField(default=True)),
                        ('error', models.CharField(blank=True, max_length=500)),
                        ('absent', models.BooleanField(default=False)),
                        ('node', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='gpus', to='inventory.node')),
                    ],
                    options={
                        'db_table': 'nodeagent_gpu',
                        'ordering': ['node', 'index'],
                        'constraints': [models.UniqueConstraint(condition=models.Q(('absent', False)), fields=('node', 'index'), name='gpu_node_index_unique')],
                    },
                ),
            ],
        ),
    ]
