# The inventory carve-out (issue 26): the content types of the moved models take their new app label, so their
# permissions (auth_permission points at the content type) and the admin's log entries (django_admin_log
# likewise) follow them. The only SQL of the move: django_content_type rows, never the moved tables.

from django.db import migrations

# (model, app before the move)
MOVED = [('gputype', 'market'), ('node', 'nodeagent'), ('gpu', 'nodeagent')]


def _relabel(apps, schema_editor, *, forward):
    ContentType = apps.get_model('contenttypes', 'ContentType')
    db = schema_editor.connection.alias
    for model, old_app in MOVED:
        source, target = (old_app, 'inventory') if forward else ('inventory', old_app)
        moving = ContentType.objects.using(db).filter(app_label=source, model=model)
        if not moving.exists():
            continue  # an empty database: post_migrate makes the content types after the last migration
        # A content type already made under the target label (post_migrate after a partial migrate) holds no
        # permission anyone granted and no log entry yet: the moving one, with its history, takes its place.
        ContentType.objects.using(db).filter(app_label=target, model=model).delete()
        moving.update(app_label=target)


def forwards(apps, schema_editor):
    _relabel(apps, schema_editor, forward=True)


def backwards(apps, schema_editor):
    _relabel(apps, schema_editor, forward=False)


class Migration(migrations.Migration):

    dependencies = [
        ('contenttypes', '0002_remove_content_type_name'),
        ('inventory', '0001_initial'),
        ('market', '0018_inventory_delete_gputype'),
        ('nodeagent', '0003_inventory_repoint'),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
