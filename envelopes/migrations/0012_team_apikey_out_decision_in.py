"""Team and ApiKey leave for accounts, and Decision comes in from approvals beside Attempt
(issue 24): in migration state only, the tables keep their names (approvals_decision too)."""

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


MOVES = {("approvals", "decision"): "envelopes"}


def content_type_to_envelopes(apps, schema_editor):
    _content_types_move(apps, MOVES)


def content_type_back(apps, schema_editor):
    _content_types_move(apps, {(new_app, model): old_app for (old_app, model), new_app in MOVES.items()})


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0001_team_apikey_membership'),
        ('approvals', '0002_decision_input_fingerprint_edited'),
        ('contenttypes', '0002_remove_content_type_name'),
        ('envelopes', '0011_step_approval_standing'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name='auditseal',
                    name='team',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='accounts.team'),
                ),
                migrations.AlterField(
                    model_name='domainevent',
                    name='team',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='+', to='accounts.team'),
                ),
                migrations.AlterField(
                    model_name='idempotencyrecord',
                    name='team',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='accounts.team'),
                ),
                migrations.AlterField(
                    model_name='auditevent',
                    name='team',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='accounts.team'),
                ),
                migrations.AlterField(
                    model_name='skippedresource',
                    name='team',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='accounts.team'),
                ),
                migrations.AlterField(
                    model_name='step',
                    name='team',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='steps', to='accounts.team'),
                ),
                migrations.AlterField(
                    model_name='envelope',
                    name='team',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='envelopes', to='accounts.team'),
                ),
                migrations.AlterField(
                    model_name='errorcode',
                    name='team',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='error_codes', to='accounts.team'),
                ),
                migrations.AlterField(
                    model_name='tool',
                    name='team',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE, related_name='tools', to='accounts.team'),
                ),
                migrations.AlterField(
                    model_name='quarantine',
                    name='team',
                    field=models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='quarantined', to='accounts.team'),
                ),
                migrations.CreateModel(
                    name='Decision',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('action', models.CharField(choices=[('approve', 'Approve'), ('reject', 'Reject'), ('mark_committed', 'Mark Committed'), ('permit_retry', 'Permit Retry'), ('cancel', 'Cancel')], max_length=20)),
                        ('reason', models.TextField(blank=True)),
                        ('decided_at', models.DateTimeField(default=django.utils.timezone.now)),
                        ('input_fingerprint', models.CharField(blank=True, default='', max_length=64)),
                        ('edited', models.BooleanField(default=False)),
                        ('edited_input', models.JSONField(blank=True, null=True)),
                        ('reviewer', models.ForeignKey(on_delete=django.db.models.deletion.PROTECT, related_name='+', to=settings.AUTH_USER_MODEL)),
                        ('step', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='decisions', to='envelopes.step')),
                    ],
                    options={
                        'db_table': 'approvals_decision',
                        'ordering': ['decided_at', 'id'],
                    },
                ),
                migrations.DeleteModel(
                    name='ApiKey',
                ),
                migrations.DeleteModel(
                    name='Team',
                ),
                migrations.AddIndex(
                    model_name='decision',
                    index=models.Index(fields=['step', 'action', 'decided_at'], name='decision_step_action_idx'),
                ),
                migrations.AddConstraint(
                    model_name='decision',
                    constraint=models.CheckConstraint(condition=models.Q(('action__in', ['approve', 'reject', 'mark_committed', 'permit_retry', 'cancel'])), name='decision_action_valid'),
                ),
                migrations.AddConstraint(
                    model_name='decision',
                    constraint=models.CheckConstraint(condition=models.Q(('action', 'approve'), models.Q(('edited', False), ('input_fingerprint', '')), _connector='OR'), name='decision_input_only_on_approve'),
                ),
                migrations.AddConstraint(
                    model_name='decision',
                    constraint=models.CheckConstraint(condition=models.Q(models.Q(('edited', False), ('edited_input__isnull', True)), models.Q(('edited', True), ('edited_input__isnull', False), models.Q(('input_fingerprint', ''), _negated=True)), _connector='OR'), name='decision_edited_has_input'),
                ),
            ],
        ),
        migrations.RunPython(content_type_to_envelopes, content_type_back),
    ]
