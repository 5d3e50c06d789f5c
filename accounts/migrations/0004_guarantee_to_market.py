# Guarantee moves from accounts to market (issue 26): it leaves accounts' state once market 0017 holds it.
# State only: the table accounts_guarantee is market.Guarantee's now and must stay.

from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0003_guarantee_inventory_gputype'),
        ('market', '0019_guarantee_from_accounts'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[],
            state_operations=[
                migrations.DeleteModel(
                    name='Guarantee',
                ),
            ],
        ),
    ]
