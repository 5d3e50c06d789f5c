"""Client ledger keys get their own namespace (docs/ledger.md §Keys): existing top-up and refund keys become
client:<tenant id>:<key>, so no client key can equal a round's hold key or a lease's settle key."""

from django.db import migrations, models
from django.db.models import CharField, F, Value
from django.db.models.functions import Cast, Concat

CLIENT_KINDS = ["topup", "refund"]


def scope_client_keys(apps, schema_editor):
    JournalEntry = apps.get_model("market", "JournalEntry")
    JournalEntry.objects.filter(kind__in=CLIENT_KINDS).exclude(key__startswith="client:").update(
        key=Concat(Value("client:"), Cast("tenant_id", CharField()), Value(":"), F("key"))
    )


def unscope_client_keys(apps, schema_editor):
    JournalEntry = apps.get_model("market", "JournalEntry")
    for entry in JournalEntry.objects.filter(kind__in=CLIENT_KINDS, key__startswith="client:"):
        entry.key = entry.key.split(":", 2)[2]
        entry.save(update_fields=["key"])


class Migration(migrations.Migration):
    dependencies = [("market", "0003_rounds")]

    operations = [
        migrations.AlterField(
            model_name="journalentry",
            name="key",
            field=models.CharField(max_length=240, unique=True),
        ),
        migrations.RunPython(scope_client_keys, unscope_client_keys),
    ]
