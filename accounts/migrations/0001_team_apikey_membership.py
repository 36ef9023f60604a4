"""Team and ApiKey (from envelopes) and Membership (from approvals) become this app's
(issue 24): in migration state only, each keeping its table, so nothing is renamed and a
database migrates in place. Their content types follow, keeping permissions and admin history."""

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


def _content_types_move(apps, moves):
    """Rename content types in place (permissions and admin log entries refer to them by id);
    one that exists under the new label already is left as it is."""
    content_type = apps.get_model("contenttypes", "ContentType")
    for (old_app, model), new_app in moves.items():
        if not content_type.objects.filter(app_label=new_app, model=model).exists():
            content_type.objects.filter(app_label=old_app, model=model).update(app_label=new_app)


MOVES = {("envelopes", "team"): "accounts", ("envelopes", "apikey"): "accounts", ("approvals", "membership"): "accounts"}


def content_types_to_accounts(apps, schema_editor):
    _content_types_move(apps, MOVES)


def content_types_back(apps, schema_editor):
    _content_types_move(apps, {(new_app, model): old_app for (old_app, model), new_app in MOVES.items()})


class Migration(migrations.Migration):

    initial = True

    dependencies = [
        ('approvals', '0002_decision_input_fingerprint_edited'),
        ('contenttypes', '0002_remove_content_type_name'),
        ('envelopes', '0011_step_approval_standing'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='Team',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('slug', models.SlugField(max_length=64, unique=True)),
                        ('name', models.CharField(blank=True, max_length=200)),
                        ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                    ],
                    options={
                        'db_table': 'envelopes_team',
                    },
                ),
                migrations.CreateModel(
                    name='ApiKey',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('name', models.CharField(max_length=100)),
                        ('prefix', models.CharField(db_index=True, max_length=16)),
                        ('key_hash', models.CharField(max_length=64, unique=True)),
                        ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                        ('revoked_at', models.DateTimeField(blank=True, null=True)),
                        ('team', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='api_keys', to='accounts.team')),
                    ],
                    options={
                        'db_table': 'envelopes_apikey',
                    },
                ),
                migrations.CreateModel(
                    name='Membership',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('role', models.CharField(choices=[('viewer', 'Viewer'), ('reviewer', 'Reviewer'), ('admin', 'Admin')], default='viewer', max_length=16)),
                        ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='memberships', to=settings.AUTH_USER_MODEL)),
                        ('team', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='memberships', to='accounts.team')),
                    ],
                    options={
                        'db_table': 'approvals_membership',
                        'constraints': [models.UniqueConstraint(fields=('user', 'team'), name='membership_unique_user_team'), models.CheckConstraint(condition=models.Q(('role__in', ['viewer', 'reviewer', 'admin'])), name='membership_role_valid')],
                    },
                ),
            ],
        ),
        migrations.RunPython(content_types_to_accounts, content_types_back),
    ]
