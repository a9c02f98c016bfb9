"""django-ninja's templates and static files as an installed app, without
importing ninja.

Installing ``"ninja"`` by its name makes Django import the whole package
(pydantic models, ninja's settings, which load ``django.test``) in every
process it sets up: about 50-60 ms of each command, indexing child and
stdio server, none of which serves the REST API. This app has ninja's
label and folder, so the template loader finds ``ninja/swagger.html`` and
the static finders ``ninja/swagger-ui-bundle.js`` as before; the REST
mirror (mcp_gateway/rest.py) imports ninja when the URLs load."""

from __future__ import annotations

import importlib.util

from django.apps import AppConfig


def package_folder(name: str) -> str:
    """The folder of an installed top-level package, found without importing it."""
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError(f"no package named {name!r}")
    return str(next(iter(spec.submodule_search_locations)))


class NinjaAssets(AppConfig):
    name = "dir2mcp_site.apps"
    label = "ninja"
    verbose_name = "django-ninja's templates and static files"
    path = package_folder("ninja")
