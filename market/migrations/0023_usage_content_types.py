# Measured usage moves from nodeagent to market (issue 26): the content types of UsageReport and LeaseUsage
# take the market's app label, so permissions granted on them and the admin's log entries follow. The only
# SQL of this move: django_content_type rows, never the moved tables.

from django.db import migrations

MOVED = ['usagereport', 'leaseusage']


def _relabel(apps, schema_editor, *, source, target):
    ContentType = apps.get_model('contenttypes', 'ContentType')
    db = schema_editor.connection.alias
    for model in MOVED:
        moving = ContentType.objects.using(db).filter(app_label=source, model=model)
        if not moving.exists():
            continue  # an empty database: post_migrate makes the content types after the last migration
        # One made under the target label (post_migrate after a partial migrate) holds no grant or log entry yet.
        ContentType.objects.using(db).filter(app_label=target, model=model).delete()
        moving.update(app_label=target)


def forwards(apps, schema_editor):
    _relabel(apps, schema_editor, source='nodeagent', target='market')


def backwards(apps, schema_editor):
    _relabel(apps, schema_editor, source='market', target='nodeagent')


class Migration(migrations.Migration):

    dependencies = [
        ('contenttypes', '0002_remove_content_type_name'),
        ('market', '0022_usage_from_nodeagent'),
        ('nodeagent', '0004_usage_to_market'),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
