"""Provider keys the configuration requires, checked before anything is
written (spec §2.5, §16.1.1).

Modes that merely *use* a provider when its key is there (``ingest.pdf.mode:
ocr``, ``images: ocr_auto``, ``audio: auto``, ``embed.provider: auto``) never
stop a start: those files wait with ``needs MISTRAL_API_KEY``. Modes that
*require* one (``images: ocr_on``, ``audio: on``, ``embed.provider:
mistral``, ``chat.provider: mistral``) do. On a TTY the missing key is asked
for with hidden input and kept for this process only; otherwise, or with
``--non-interactive``, the start fails with exit 2 and says what to set.
"""

from __future__ import annotations

import getpass
import os
from collections.abc import Callable
from dataclasses import dataclass

from corpus.management.base import Runtime
from kernel import errors
from kernel.config import Config
from mcp_gateway.listen import ListenAddress


@dataclass(frozen=True)
class Need:
    secret: str  # the secret's name in kernel.secrets
    variable: str  # the environment variable a user sets
    why: str


def required_keys(config: Config) -> list[Need]:
    """The keys this configuration cannot run without, once each."""
    needs: list[Need] = []
    if config.embed.provider == "mistral":
        needs.append(Need("mistral_api_key", "MISTRAL_API_KEY", "embed.provider is mistral"))
    if config.chat.provider == "mistral":
        needs.append(Need("mistral_api_key", "MISTRAL_API_KEY", "chat.provider is mistral"))
    if config.ingest.images.mode == "ocr_on":
        needs.append(Need("mistral_api_key", "MISTRAL_API_KEY", "ingest.images.mode is ocr_on"))
    if config.ingest.audio.mode == "on":
        if config.stt.provider == "elevenlabs":
            needs.append(
                Need("elevenlabs_api_key", "ELEVENLABS_API_KEY", "ingest.audio.mode is on (ElevenLabs)")
            )
        else:
            needs.append(Need("mistral_api_key", "MISTRAL_API_KEY", "ingest.audio.mode is on (Mistral)"))
    unique: dict[str, Need] = {}
    for need in needs:
        unique.setdefault(need.secret, need)
    return list(unique.values())


def check_keys(rt: Runtime, *, ask: Callable[[str], str] = getpass.getpass) -> None:
    """Every required key is found, asked for (TTY), or the start fails (exit 2)."""
    for need in required_keys(rt.config):
        if rt.secret(need.secret):
            continue
        if rt.interactive:
            value = ask(f"{need.variable} ({need.why}; input hidden, kept for this session only): ").strip()
            if value:
                os.environ[need.variable] = value  # session-only: never written anywhere
                continue
        raise errors.Dir2mcpError(
            errors.CONFIG_INVALID,
            f"Missing {need.variable}",
            hint=(
                f"{need.why}. Set {need.variable} in the environment, store it with "
                "`dir2mcp config init` (keychain or 0600 file), or change that setting."
            ),
        )


def check_reach(spec: str, address: ListenAddress, *, public: bool) -> None:
    """``--auth none`` is refused beyond loopback (exit 2)."""
    if spec == "none" and (public or not address.loopback):
        raise errors.Dir2mcpError(
            errors.CONFIG_INVALID,
            f"serving {address} (beyond loopback) requires a bearer token; --auth none is refused",
            hint="Drop --auth none (a token is generated in secret.token), or use --auth file:<path>.",
        )


def payments_warning(config: Config) -> str | None:
    """x402's start-up verdict (payments/gate.py): mode ``required`` without a
    complete policy raises CONFIG_INVALID; ``on`` with one gives the warning."""
    if config.x402.mode == "off":
        return None
    from payments import gate  # x402 and its eth libraries take ~0.6 s to import: paid servers only

    return gate.verdict(config).warning
