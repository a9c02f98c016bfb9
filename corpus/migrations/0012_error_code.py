"""A stored error's code gets a column of its own (issue #20).

Documents and job items kept their error as one ``"CODE: message"`` string,
which readers split, each its own way. The code now has a column; existing
rows get it by splitting their string here, once. A document's ``error``
stays the text shown (``status``, the admin); a job item's keeps the message
only, and going back folds the code into it again.
"""

from django.db import migrations, models

from kernel import errors

BATCH = 1000


def _split(error: str) -> tuple[str, str]:
    """(code, message) of a stored error; ("", error) when it names no code."""
    code, sep, message = error.partition(": ")
    if sep and message and code.replace("_", "").isalnum() and code.isupper():
        return code, message
    return "", error


def _fill_documents(Document) -> None:
    rows = Document.objects.exclude(error__isnull=True).exclude(error="").values_list("pk", "error")
    by_code: dict[str, list[int]] = {}
    for pk, error in rows.iterator(chunk_size=BATCH):
        code = _split(error)[0]
        if code:
            by_code.setdefault(code, []).append(pk)
    for code, pks in by_code.items():
        for start in range(0, len(pks), BATCH):
            Document.objects.filter(pk__in=pks[start : start + BATCH]).update(error_code=code)


def _fill_job_items(JobItem) -> None:
    items = list(JobItem.objects.exclude(error="").only("pk", "error", "state"))
    for item in items:
        code, message = _split(item.error)
        # A failure without a code was reported as an extraction failure.
        item.error_code = code or (errors.EXTRACT_FAILED if item.state == "failed" else "")
        item.error = message
    JobItem.objects.bulk_update(items, ["error", "error_code"], batch_size=BATCH)


def forwards(apps, schema_editor) -> None:
    _fill_documents(apps.get_model("corpus", "Document"))
    _fill_job_items(apps.get_model("corpus", "JobItem"))


def backwards(apps, schema_editor) -> None:
    JobItem = apps.get_model("corpus", "JobItem")
    items = list(JobItem.objects.exclude(error_code="").only("pk", "error", "error_code"))
    for item in items:
        item.error = f"{item.error_code}: {item.error}"
    JobItem.objects.bulk_update(items, ["error"], batch_size=BATCH)


class Migration(migrations.Migration):
    dependencies = [
        ("corpus", "0011_chunk_context"),
    ]

    operations = [
        migrations.AddField(
            model_name="document",
            name="error_code",
            field=models.CharField(blank=True, default="", max_length=32),
        ),
        migrations.AddField(
            model_name="jobitem",
            name="error_code",
            field=models.CharField(blank=True, default="", max_length=32),
        ),
        migrations.RunPython(forwards, backwards),
    ]
