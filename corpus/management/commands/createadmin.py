"""``createadmin``: the first admin user, in one step a script can run too."""

from __future__ import annotations

import getpass
import os
from pathlib import Path
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import CommandParser

from corpus.management.base import Dir2mcpCommand
from corpus.store import open_store
from kernel import errors
from kernel.jsontypes import JsonObject

PASSWORD_ENV = "DIR2MCP_ADMIN_PASSWORD"


class Command(Dir2mcpCommand):
    help = (
        "Create (or reset) an admin user for /admin/ and the status page. The password comes from "
        f"--password-file, else ${PASSWORD_ENV}, else a hidden prompt on a terminal."
    )

    def add_command_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="admin", help="User name (default: admin).")
        parser.add_argument("--email", default="", help="E-mail address (optional).")
        parser.add_argument(
            "--password-file", help="Read the password from this file (first line); never pass it as a flag."
        )

    def handle(self, *args: Any, **options: Any) -> None:  # Any: BaseCommand.handle's signature
        rt = self.runtime(options)
        password = self._password(options, interactive=rt.interactive)
        username = options["username"].strip()
        if not username:
            raise errors.Dir2mcpError(errors.INVALID_FIELD, "--username must not be empty")
        open_store(rt.state)
        user, created = _save_admin(username, options["email"], password)
        verb = "Created" if created else "Updated"
        rt.reporter.say(
            f"{verb} admin user {user.get_username()!r}; sign in at /admin/ of the running server."
        )

    def _password(self, options: JsonObject, *, interactive: bool) -> str:
        if options.get("password_file"):
            path = Path(options["password_file"])
            try:
                password = path.read_text(encoding="utf-8").splitlines()[0] if path.stat().st_size else ""
            except OSError as exc:
                raise errors.Dir2mcpError(
                    errors.CONFIG_INVALID, f"cannot read --password-file: {exc.strerror}"
                ) from None
        elif os.environ.get(PASSWORD_ENV):
            password = os.environ[PASSWORD_ENV]
        elif interactive:
            password = getpass.getpass("Password: ")
            if getpass.getpass("Password (again): ") != password:
                raise errors.Dir2mcpError(errors.INVALID_FIELD, "the passwords do not match")
        else:
            raise errors.Dir2mcpError(
                errors.MISSING_FIELD,
                "no password given",
                hint=f"Set {PASSWORD_ENV} or pass --password-file <path>.",
            )
        if not password:
            raise errors.Dir2mcpError(errors.MISSING_FIELD, "the password is empty")
        try:
            validate_password(password)
        except ValidationError as exc:
            raise errors.Dir2mcpError(
                errors.INVALID_FIELD, "password rejected: " + " ".join(exc.messages)
            ) from None
        return password


def _save_admin(username: str, email: str, password: str) -> tuple[AbstractBaseUser, bool]:
    """Create the superuser, or make an existing user one with this password."""
    user, created = get_user_model().objects.get_or_create(username=username, defaults={"email": email})
    user.is_staff = user.is_superuser = user.is_active = True
    if email:
        user.email = email
    user.set_password(password)
    user.save()
    return user, created
