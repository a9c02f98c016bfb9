"""x402's configuration (spec §16, §18): the ``x402`` section of the
configuration and the rules that keep its switches consistent.

The spec's config lists ``x402.enabled`` and
``x402.route_policy.tools_call.enabled`` beside ``x402.mode``.
``x402.enabled`` is the boolean form of the mode: set alone, ``true`` means
``on`` and ``false`` means ``off``; a layer that sets the mode sets it too
(as ``--x402`` does), so a higher layer wins as for any key, and one layer
saying opposite things is ``CONFIG_INVALID``. ``tools_call.enabled`` says
whether ``tools/call`` (and the REST routes priced like it) is sold: a layer
that turns payments on turns it on unless it sets it; ``false`` with
payments on is a policy problem (``required`` refuses to start, ``on``
serves free and warns; ``payments/policy.py`` checks the policy as a whole).

:mod:`kernel.config` merges the layers; it calls :func:`layer_switches` on
each before merging and :func:`merged_switches` on the result.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Annotated, Literal

from pydantic import BeforeValidator, Field, TypeAdapter, ValidationError

from kernel import errors
from kernel.config_base import Section, Switch, switch_word
from kernel.jsontypes import JsonObject, JsonValue

MODES = ("off", "on", "required")


def _money_text(value: object) -> object:
    # An unquoted YAML or env price (0.001) arrives as a float; keep its text.
    if isinstance(value, int | float) and not isinstance(value, bool):
        return format(Decimal(repr(value)), "f") if isinstance(value, float) else str(value)
    return value


Money = Annotated[str, BeforeValidator(_money_text)]


def _address_text(value: object) -> object:
    # YAML and env values read an unquoted 0x… address as a hex integer.
    if isinstance(value, int) and not isinstance(value, bool):
        return f"0x{value:040x}"
    return value


Address = Annotated[str, BeforeValidator(_address_text)]


class ToolsCallPolicy(Section):
    enabled: bool = False
    #: default price of a paid tool call, in USD ("0.001", "$0.01") or atomic units with an asset
    price: Money = "0.001"
    #: per-tool prices; "0" makes a tool free
    prices: dict[str, Money] = Field(default_factory=dict)
    network: str = "eip155:8453"
    scheme: str = "exact"
    asset: Address = ""
    pay_to: Address = ""
    max_timeout_seconds: int = Field(300, ge=1, le=86400)
    #: EIP-712 domain of a custom asset, e.g. {"name": "USDC", "version": "2"}
    extra: dict[str, str] = Field(default_factory=dict)


class RoutePolicy(Section):
    tools_call: ToolsCallPolicy = ToolsCallPolicy()


class BazaarConfig(Section):
    enabled: bool = False
    metadata: JsonObject = Field(default_factory=lambda: {"description": ""})
    #: per-tool example arguments shown in the discovery catalog
    examples: dict[str, JsonObject] = Field(default_factory=dict)


class X402Config(Section):
    enabled: bool = False
    mode: Annotated[Literal["off", "on", "required"], Switch] = "off"
    facilitator_url: str = ""
    resource_base_url: str = ""
    route_policy: RoutePolicy = RoutePolicy()
    bazaar: BazaarConfig = BazaarConfig()


def mode_word(value: object) -> str | None:
    """The mode a value names, or None for pydantic to report."""
    word = switch_word(value)
    return word if isinstance(word, str) and word in MODES else None


def _truth(value: object) -> bool | None:
    try:
        return TypeAdapter(bool).validate_python(value)
    except ValidationError:
        return None  # pydantic reports it


def _with_tools_call_enabled(x402: JsonObject, value: bool) -> None:
    """Set ``route_policy.tools_call.enabled`` unless it is set (or the tree is malformed)."""
    route = x402.get("route_policy", {})
    tools_call = route.get("tools_call", {}) if isinstance(route, Mapping) else None
    if isinstance(tools_call, Mapping) and "enabled" not in tools_call:
        x402["route_policy"] = {**route, "tools_call": {**tools_call, "enabled": value}}


def layer_switches(data: Mapping[str, JsonValue], origin: str) -> Mapping[str, JsonValue]:
    """One layer (``origin`` names it) with its x402 switches made consistent."""
    x402 = data.get("x402")
    if not isinstance(x402, Mapping):
        return data
    x402 = dict(x402)
    mode = mode_word(x402["mode"]) if "mode" in x402 else None
    enabled = _truth(x402["enabled"]) if "enabled" in x402 else None
    if mode is not None and enabled is not None and enabled != (mode != "off"):
        raise errors.Dir2mcpError(
            errors.CONFIG_INVALID,
            f"{origin}: x402.enabled is {str(enabled).lower()} but x402.mode is {mode!r}; "
            "they say opposite things",
            hint="x402.mode (off|on|required) is the switch: remove x402.enabled, or make it "
            "true for on/required and false for off.",
        )
    if mode is not None and "enabled" not in x402:
        x402["enabled"] = mode != "off"
    elif enabled is False and "mode" not in x402:
        x402["mode"] = "off"
    if mode in ("on", "required") or (enabled is True and mode is None):
        # Turning payments on sells tools/call, the one priced route, unless this layer says otherwise.
        _with_tools_call_enabled(x402, True)
    return {**data, "x402": x402}


def merged_switches(merged: JsonObject) -> JsonObject:
    """The merged layers with the x402 switches settled between them."""
    if not isinstance(merged.get("x402"), Mapping):
        return merged
    x402 = merged["x402"] = dict(merged["x402"])
    mode = mode_word(x402.get("mode", "off"))
    if mode == "off" and _truth(x402.get("enabled")) is True:
        x402["mode"] = mode = "on"
    if mode is not None:
        x402.setdefault("enabled", mode != "off")
        _with_tools_call_enabled(x402, mode != "off")
    return merged
