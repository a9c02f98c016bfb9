"""The effective price policy: which tools are paid, for how much, to whom.

Built once from ``config.x402`` and checked as a whole, so ``required`` can
refuse to start and ``on`` can say exactly what is missing. Prices written
in USD (``"0.001"``, ``"$0.01"``) become atomic units of the network's
default USDC through the x402 package's own ``parse_price``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from urllib.parse import urlsplit

from x402 import PaymentRequirements

from kernel.jsontypes import JsonObject
from kernel.state import write_json
from kernel.x402_config import ToolsCallPolicy, X402Config
from payments.evm import ExactEvmServerScheme, get_asset_info, is_valid_address

# CAIP-2: namespace (3-8 of [-a-z0-9]) ":" reference (1-32 of [-_a-zA-Z0-9]).
CAIP2_RE = re.compile(r"^[-a-z0-9]{3,8}:[-_a-zA-Z0-9]{1,32}$")
SUPPORTED_SCHEMES = ("exact",)
#: never gated, whatever the configuration says (spec §18)
LIFECYCLE_METHODS = frozenset({"initialize", "notifications/initialized", "tools/list", "ping"})
_ATOMIC_RE = re.compile(r"^\d+$")


def caip2_problem(network: str) -> str | None:
    """Why ``network`` is not a usable CAIP-2 id, or ``None``."""
    if not CAIP2_RE.match(network or ""):
        return f"network {network!r} is not a CAIP-2 id (e.g. eip155:8453, eip155:84532)"
    namespace, reference = network.split(":", 1)
    if namespace != "eip155":
        return f"network {network!r}: only eip155 (EVM) networks are supported by this build"
    if not reference.isdigit() or int(reference) == 0:
        return f"network {network!r}: an eip155 reference is a decimal chain id"
    return None


def _url_problem(key: str, value: str) -> str | None:
    if not value:
        return f"{key} is not set"
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        return f"{key} must be an http(s) URL (got {value!r})"
    return None


@dataclass(frozen=True)
class Price:
    """One tool's price: atomic ``amount`` of ``asset`` on ``network``, paid to ``pay_to``."""

    amount: str
    asset: str
    network: str
    pay_to: str
    scheme: str
    max_timeout_seconds: int
    extra: JsonObject = field(default_factory=dict, hash=False, compare=False)
    display: str = ""

    def requirements(self) -> PaymentRequirements:
        return PaymentRequirements(
            scheme=self.scheme,
            network=self.network,
            asset=self.asset,
            amount=self.amount,
            pay_to=self.pay_to,
            max_timeout_seconds=self.max_timeout_seconds,
            extra=dict(self.extra),
        )


@dataclass(frozen=True)
class Policy:
    """A complete, validated policy."""

    mode: str
    facilitator_url: str
    resource_url: str
    default: Price
    per_tool: dict[str, Price | None]
    bazaar: bool = False
    #: the public base URL (``x402.resource_base_url``), for resources other than the MCP endpoint
    resource_base: str = ""

    def price_for(self, tool_name: str) -> Price | None:
        return self.per_tool.get(tool_name, self.default)

    def snapshot(self) -> JsonObject:
        """What ``pricing.snapshot.json`` holds: no secret is part of a policy."""

        def view(price: Price | None) -> JsonObject | None:
            if price is None:
                return None
            return {"price": price.display, "amount": price.amount, "asset": price.asset}

        return {
            "mode": self.mode,
            "facilitator_url": self.facilitator_url,
            "resource_url": self.resource_url,
            "network": self.default.network,
            "scheme": self.default.scheme,
            "pay_to": self.default.pay_to,
            "max_timeout_seconds": self.default.max_timeout_seconds,
            "default": view(self.default),
            "tools": {name: view(price) for name, price in sorted(self.per_tool.items())},
            "never_gated": sorted(LIFECYCLE_METHODS),
            "bazaar": self.bazaar,
        }


class PolicyProblems(Exception):
    """The configuration is incomplete or invalid; ``problems`` lists why."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


def _price(text: str, policy: ToolsCallPolicy, network: str) -> tuple[str, str, JsonObject]:
    """(atomic amount, asset, extra) for a configured price text."""
    raw = text.strip()
    if policy.asset:
        try:
            info = get_asset_info(network, policy.asset)
        except ValueError:
            info = None
        if info is None:
            if not _ATOMIC_RE.match(raw):
                raise ValueError(f"price {text!r}: a custom asset needs an amount in atomic units")
            if not {"name", "version"} <= set(policy.extra):
                raise ValueError("a custom asset needs extra.name and extra.version (its EIP-712 domain)")
            return raw, policy.asset, dict(policy.extra)
        scale = Decimal(10) ** info["decimals"]
        amount = Decimal(raw.removeprefix("$")) * scale
        extra = {"name": info["name"], "version": info["version"], **policy.extra}
        return _integral(amount, text), info["address"], extra
    parsed = ExactEvmServerScheme().parse_price(raw, network)
    decimals = get_asset_info(network, parsed.asset)["decimals"]
    _integral(Decimal(raw.removeprefix("$")) * Decimal(10) ** decimals, text)
    return parsed.amount, parsed.asset, {**(parsed.extra or {}), **policy.extra}


def _integral(amount: Decimal, text: str) -> str:
    if amount != amount.to_integral_value():
        raise ValueError(f"price {text!r} is finer than the asset's smallest unit")
    return str(int(amount))


def _build_price(text: str, policy: ToolsCallPolicy, network: str) -> Price | None:
    try:
        if Decimal(text.strip().removeprefix("$")) == 0:
            return None
    except InvalidOperation:
        raise ValueError(f"price {text!r} is not a number such as 0.001 or $0.01") from None
    if Decimal(text.strip().removeprefix("$")) < 0:
        raise ValueError(f"price {text!r} is negative")
    amount, asset, extra = _price(text, policy, network)
    return Price(
        amount=amount,
        asset=asset,
        network=network,
        pay_to=policy.pay_to,
        scheme=policy.scheme,
        max_timeout_seconds=policy.max_timeout_seconds,
        extra=extra,
        display=text.strip(),
    )


def build_policy(x402: X402Config, *, mcp_path: str = "/mcp") -> Policy:
    """Validate ``config.x402`` as a whole; raise :class:`PolicyProblems` listing every gap."""
    policy = x402.route_policy.tools_call
    problems = [
        p
        for p in (
            _url_problem("x402.facilitator_url", x402.facilitator_url),
            _url_problem("x402.resource_base_url", x402.resource_base_url),
            caip2_problem(policy.network),
        )
        if p
    ]
    if not policy.enabled:
        problems.append(
            "x402.route_policy.tools_call.enabled is false: tools/call (and the REST routes priced like it) "
            "is not a paid route, so nothing would be sold; set it to true or remove the key"
        )
    if policy.scheme not in SUPPORTED_SCHEMES:
        problems.append(f"x402.route_policy.tools_call.scheme {policy.scheme!r} is not supported (use exact)")
    if not policy.pay_to:
        problems.append("x402.route_policy.tools_call.pay_to is not set (the address that receives payments)")
    elif not is_valid_address(policy.pay_to):
        problems.append(f"x402.route_policy.tools_call.pay_to {policy.pay_to!r} is not an EVM address")
    if policy.asset and not is_valid_address(policy.asset):
        problems.append(f"x402.route_policy.tools_call.asset {policy.asset!r} is not an EVM address")
    if problems:
        raise PolicyProblems(problems)
    prices: dict[str, Price | None] = {}
    default = None
    for key, text in [("price", policy.price), *((f"prices.{k}", v) for k, v in policy.prices.items())]:
        try:
            price = _build_price(text, policy, policy.network)
        except ValueError as exc:
            problems.append(f"x402.route_policy.tools_call.{key}: {exc}")
            continue
        if key == "price":
            default = price
        else:
            prices[key.removeprefix("prices.")] = price
    if not problems and default is None:
        problems.append("x402.route_policy.tools_call.price is 0: set a default price above zero")
    if problems or default is None:
        raise PolicyProblems(problems)
    base = x402.resource_base_url.rstrip("/")
    return Policy(
        mode=x402.mode,
        facilitator_url=x402.facilitator_url.rstrip("/"),
        resource_url=base + (mcp_path if not base.endswith(mcp_path) else ""),
        default=default,
        per_tool=prices,
        bazaar=x402.bazaar.enabled,
        resource_base=base,
    )


def write_snapshot(policy: Policy, state_dir: Path) -> Path:
    """Write ``<state>/payments/pricing.snapshot.json`` and return its path."""
    path = Path(state_dir) / "payments" / "pricing.snapshot.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_json(path, policy.snapshot())
    return path
