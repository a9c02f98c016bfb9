"""The interactive ``config init`` flow: masked secret prompts on a TTY."""

from __future__ import annotations

import getpass
from dataclasses import dataclass, field
from pathlib import Path

from kernel import secrets as secret_store
from kernel.config import Config
from kernel.state import StateDir

_SECRET_LABELS = {"mistral_api_key": "Mistral API key", "elevenlabs_api_key": "ElevenLabs API key"}


@dataclass
class WizardResult:
    """What the wizard decided: the config to write and where secrets went."""

    config: Config
    session: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def _choose(prompt: str, choices: list[str], default: str) -> str:
    while True:
        answer = input(f"{prompt} [{'/'.join(choices)}] (default {default}): ").strip().lower()
        if not answer:
            return default
        if answer in choices:
            return answer
        print(f"Please answer one of: {', '.join(choices)}.")


def _ask_key(label: str) -> str:
    # getpass turns terminal echo off: the key is never shown (§2.5).
    return getpass.getpass(f"{label} (input hidden; Enter to skip): ").strip()


def _stored_note(label: str, secret: secret_store.Secret) -> str:
    if secret.source == "env":
        return f"{label} not stored: before running dir2mcp, export {secret.detail}=<your key>"
    if secret.source == "session":
        return f"{label} kept for this session only; dir2mcp will ask again next time."
    where = "the OS keychain" if secret.source == "keychain" else "the secret file"
    return f"{label} stored in {where} ({secret.detail})."


def run_wizard(state: StateDir, root: Path) -> WizardResult:
    """Ask for keys, STT provider and secret store; store the keys."""
    keys = {"mistral_api_key": _ask_key("Mistral API key")}
    stt = _choose("Speech-to-text provider", ["mistral", "elevenlabs"], "mistral")
    if stt == "elevenlabs":
        keys["elevenlabs_api_key"] = _ask_key("ElevenLabs API key")
    keys = {name: value for name, value in keys.items() if value}
    store = "auto"
    if keys:
        stores = [s for s in secret_store.STORES if s != "keychain" or secret_store.keychain_available()]
        store = _choose("Store secrets in", stores, stores[0])
    config = Config.model_validate({"stt": {"provider": stt}, "secrets": {"provider": store}})
    result = WizardResult(config)
    for name, value in keys.items():
        secret = secret_store.store_secret(name, value, config, state, provider=store, root=root)
        if secret.source == "session":
            result.session[name] = value
        result.notes.append(_stored_note(_SECRET_LABELS[name], secret))
    if not keys:
        result.notes.append("No API key entered: set MISTRAL_API_KEY, or run `config init --force` again.")
    return result
