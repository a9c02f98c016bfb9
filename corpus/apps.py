from django.apps import AppConfig


class CorpusConfig(AppConfig):
    name = "corpus"
    verbose_name = "Corpus"
    default_auto_field = "django.db.models.BigAutoField"
