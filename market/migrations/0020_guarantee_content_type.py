# Guarantee moves from accounts to market (issue 26): its content type takes the market's app label, so the
# permissions granted on it and the admin's log entries follow. The only SQL of this move.

from django.db import migrations


def _relabel(apps, schema_editor, *, source, target):
    ContentType = apps.get_model('contenttypes', 'ContentType')
    db = schema_editor.connection.alias
    moving = ContentType.objects.using(db).filter(app_label=source, model='guarantee')
    if not moving.exists():
        return  # an empty database: post_migrate makes the content types after the last migration
    # One made under the target label (post_migrate after a partial migrate) holds no grant or log entry yet.
    ContentType.objects.using(db).filter(app_label=target, model='guarantee').delete()
    moving.update(app_label=target)


def forwards(apps, schema_editor):
    _relabel(apps, schema_editor, source='accounts', target='market')


def backwards(apps, schema_editor):
    _relabel(apps, schema_editor, source='market', target='accounts')


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0004_guarantee_to_market'),
        ('contenttypes', '0002_remove_content_type_name'),
        ('market', '0019_guarantee_from_accounts'),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
