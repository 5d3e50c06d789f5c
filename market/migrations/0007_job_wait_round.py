# rounds_waited is derived from (waited_before, wait_round) instead of being written on every loser each round
# (market.selectors.waiting; docs/rounds.md §Rounds waited).

from django.db import migrations, models
from django.db.models import Max

import market.models.jobs


def _mark_existing(apps, schema_editor):
    """A job's stored count so far becomes its count up to the newest frozen round: nothing changes for it."""
    Round = apps.get_model("market", "Round")
    Job = apps.get_model("market", "Job")
    top = Round.objects.exclude(state="open").aggregate(top=Max("pk"))["top"] or 0
    Job.objects.update(wait_round=top)


class Migration(migrations.Migration):
    dependencies = [
        ("market", "0006_merge_ops_constraints"),
    ]

    operations = [
        migrations.RenameField(model_name="job", old_name="rounds_waited", new_name="waited_before"),
        migrations.AlterField(
            model_name="job",
            name="waited_before",
            field=models.PositiveIntegerField(default=0, help_text="Rounds waited up to wait_round."),
        ),
        migrations.AddField(
            model_name="job",
            name="wait_round",
            field=models.BigIntegerField(default=0, help_text="Later rounds count (while pending)."),
        ),
        migrations.RunPython(_mark_existing, migrations.RunPython.noop),
        migrations.AlterField(
            model_name="job",
            name="wait_round",
            field=models.BigIntegerField(
                default=market.models.jobs.wait_mark, help_text="Later rounds count (while pending)."
            ),
        ),
    ]
