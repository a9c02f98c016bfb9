"""Payment modes, configuration checks, the pricing snapshot and Bazaar metadata."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from x402.http import decode_payment_required_header

from kernel import errors, x402_config
from kernel.config import Config, build_config, env_overrides
from kernel.config_template import render_config
from payments import gate as gate_mod
from payments.policy import caip2_problem
from tests.x402_client import BASE_SEPOLIA, PAY_TO

pytestmark = pytest.mark.django_db

COMPLETE = {
    "facilitator_url": "http://127.0.0.1:9/facilitator",
    "resource_base_url": "https://files.example",
    "route_policy": {"tools_call": {"price": "$0.002", "network": BASE_SEPOLIA, "pay_to": PAY_TO}},
}


def config(mode: str, **x402):
    return build_config({"x402": {"mode": mode, **x402}}, {}, {})


@pytest.mark.parametrize(
    "network, ok",
    [
        pytest.param("eip155:8453", True, id="base"),
        pytest.param("eip155:84532", True, id="base-sepolia"),
        pytest.param("base-sepolia", False, id="v1-name"),
        pytest.param("eip155:", False, id="empty-reference"),
        pytest.param("eip155:0x14a34", False, id="hex-chain-id"),
        pytest.param("EIP155:8453", False, id="upper-case-namespace"),
        pytest.param("solana:5eykt4UsFv8P8NJdTREpY1vzqKqZKvdp", False, id="solana-unsupported"),
        pytest.param("", False, id="empty"),
    ],
)
def test_caip2_networks_are_validated(network, ok):
    assert (caip2_problem(network) is None) is ok


def test_off_mode_has_no_gate(tmp_path):
    assert gate_mod.from_config(config("off", **COMPLETE), tmp_path) is None
    assert not (tmp_path / "payments").exists()


@pytest.mark.parametrize(
    "change, needle",
    [
        pytest.param({"facilitator_url": ""}, "facilitator_url is not set", id="no-facilitator"),
        pytest.param({"facilitator_url": "ftp://x"}, "must be an http(s) URL", id="bad-facilitator"),
        pytest.param({"resource_base_url": ""}, "resource_base_url is not set", id="no-resource"),
        pytest.param({"network": "base"}, "is not a CAIP-2 id", id="bad-network"),
        pytest.param({"pay_to": ""}, "pay_to is not set", id="no-pay-to"),
        pytest.param({"pay_to": "0x1234"}, "is not an EVM address", id="bad-pay-to"),
        pytest.param({"price": "cheap"}, "is not a number", id="bad-price"),
        pytest.param({"price": "0"}, "set a default price above zero", id="zero-default"),
        pytest.param({"price": "0.0000001"}, "finer than the asset's smallest unit", id="too-fine"),
        pytest.param({"network": "eip155:999999"}, "price", id="no-default-asset"),
    ],
)
def test_required_with_incomplete_config_refuses_to_start_with_exit_2(tmp_path, change, needle):
    top = {k: v for k, v in change.items() if k in ("facilitator_url", "resource_base_url")}
    tools_call = {
        **COMPLETE["route_policy"]["tools_call"],
        **{k: v for k, v in change.items() if k not in top},
    }
    cfg = config("required", **{**COMPLETE, **top, "route_policy": {"tools_call": tools_call}})
    with pytest.raises(errors.Dir2mcpError) as caught:
        gate_mod.from_config(cfg, tmp_path)
    assert caught.value.code == errors.CONFIG_INVALID and caught.value.exit_code == 2
    assert needle in caught.value.message


def test_on_with_incomplete_config_serves_ungated_and_warns_loudly(tmp_path, caplog):
    events: list[dict] = []
    cfg = config("on", facilitator_url="https://facilitator.example")
    assert gate_mod.from_config(cfg, tmp_path, emit=events.append) is None
    assert events[0]["event"] == "warning" and "NOT enforced" in events[0]["data"]["message"]
    assert "pay_to is not set" in " ".join(events[0]["data"]["problems"])
    assert "NOT enforced" in caplog.text
    assert gate_mod.problems(cfg) == events[0]["data"]["problems"]


def test_env_aliases_reach_the_policy():
    env = env_overrides(
        {"DIR2MCP_X402_NETWORK": "eip155:84532", "DIR2MCP_X402_PRICE": "0.05", "DIR2MCP_X402_PAY_TO": PAY_TO}
    )
    tools_call = build_config({}, env, {}).x402.route_policy.tools_call
    assert (tools_call.network, tools_call.price) == ("eip155:84532", "0.05")
    assert tools_call.pay_to == PAY_TO.lower()  # YAML reads 0x… as a number; the address survives


def test_snapshot_records_per_tool_prices_and_never_gated_methods(tmp_path):
    tools_call = {
        **COMPLETE["route_policy"]["tools_call"],
        "prices": {"dir2mcp.ask": "0.05", "dir2mcp.stats": 0},
    }
    cfg = config("required", **{**COMPLETE, "route_policy": {"tools_call": tools_call}})
    gate = gate_mod.from_config(cfg, tmp_path)
    snap = json.loads((tmp_path / "payments" / "pricing.snapshot.json").read_text())
    assert snap["mode"] == "required" and snap["network"] == BASE_SEPOLIA and snap["pay_to"] == PAY_TO
    assert snap["default"] == {"price": "$0.002", "amount": "2000", "asset": gate.price_for("x").asset}
    assert snap["tools"]["dir2mcp.ask"]["amount"] == "50000"
    assert snap["tools"]["dir2mcp.stats"] is None and gate.price_for("dir2mcp.stats") is None
    assert {"initialize", "tools/list", "ping"} <= set(snap["never_gated"])
    assert gate.price_for("dir2mcp.search").amount == "2000"
    gate.close()


def test_custom_asset_takes_atomic_units_and_its_eip712_domain(tmp_path):
    asset = "0x1111111111111111111111111111111111111111"
    tools_call = {**COMPLETE["route_policy"]["tools_call"], "asset": asset, "price": "25"}
    cfg = config("required", **{**COMPLETE, "route_policy": {"tools_call": tools_call}})
    with pytest.raises(errors.Dir2mcpError, match="extra.name and extra.version"):
        gate_mod.from_config(cfg, tmp_path)
    tools_call["extra"] = {"name": "Token", "version": "1"}
    cfg = config("required", **{**COMPLETE, "route_policy": {"tools_call": tools_call}})
    price = gate_mod.from_config(cfg, tmp_path).price_for("dir2mcp.search")
    assert (price.amount, price.asset, price.extra) == ("25", asset, {"name": "Token", "version": "1"})


def test_bazaar_extension_describes_each_paid_tool(tmp_path: Path):
    cfg = config(
        "required",
        **COMPLETE,
        bazaar={"enabled": True, "examples": {"dir2mcp.search": {"query": "invoices", "k": 5}}},
    )
    tools = {
        "dir2mcp.search": {
            "description": "Hybrid search",
            "inputSchema": {
                "type": "object",
                "properties": {"query": {"type": "string"}},
                "required": ["query"],
            },
        }
    }
    gate = gate_mod.from_config(cfg, tmp_path, tools=tools)
    outcome = gate.handle(
        tool_name="dir2mcp.search",
        arguments={"query": "x"},
        header=None,
        meta_payment=None,
        request_hash="h",
        run=lambda: {"content": [], "isError": False},
    )
    bazaar = decode_payment_required_header(outcome.headers["PAYMENT-REQUIRED"]).extensions["bazaar"]
    assert bazaar["info"]["input"] == {
        "type": "mcp",
        "toolName": "dir2mcp.search",
        "description": "Hybrid search",
        "transport": "streamable-http",
        "inputSchema": tools["dir2mcp.search"]["inputSchema"],
        "example": {"query": "invoices", "k": 5},
    }
    assert bazaar["schema"]["properties"]["input"]["required"] == ["type", "toolName", "inputSchema"]
    gate.close()


def test_without_bazaar_no_extension_is_sent(tmp_path):
    gate = gate_mod.from_config(config("required", **COMPLETE), tmp_path, tools={"dir2mcp.search": {}})
    required = gate.payment_required("dir2mcp.search")
    assert not required.extensions
    gate.close()


@pytest.mark.parametrize(
    "method, gated",
    [
        pytest.param("initialize", False, id="initialize"),
        pytest.param("notifications/initialized", False, id="initialized"),
        pytest.param("tools/list", False, id="tools-list"),
        pytest.param("ping", False, id="ping"),
        pytest.param("logging/setLevel", False, id="set-level"),
        pytest.param("tools/call", True, id="tools-call"),
    ],
)
def test_only_tools_call_is_ever_gated(method, gated):
    assert gate_mod.gated_method(method) is gated


TEMPLATE = {"enabled": False, "mode": "off", "route_policy": {"tools_call": {"enabled": False}}}


@pytest.mark.parametrize(
    "file, env, flags, expected",
    [
        pytest.param({}, {}, {}, ("off", False, False), id="defaults"),
        pytest.param({"enabled": True}, {}, {}, ("on", True, True), id="enabled-alone-means-on"),
        pytest.param({"enabled": False}, {}, {}, ("off", False, False), id="disabled-alone-means-off"),
        pytest.param({"mode": "required"}, {}, {}, ("required", True, True), id="mode-alone"),
        pytest.param(
            TEMPLATE, {}, {"mode": "required", "enabled": True}, ("required", True, True), id="template+flag"
        ),
        pytest.param(TEMPLATE, {"mode": "on"}, {}, ("on", True, True), id="template+env-mode"),
        pytest.param(TEMPLATE, {"enabled": True}, {}, ("on", True, True), id="template+env-enabled"),
        pytest.param({"mode": "required"}, {"enabled": False}, {}, ("off", False, True), id="env-disables"),
        pytest.param({"enabled": True}, {"mode": "off"}, {}, ("off", False, True), id="env-mode-off-wins"),
    ],
)
def test_x402_enabled_is_the_boolean_form_of_the_mode(file, env, flags, expected):
    cfg = build_config({"x402": file}, {"x402": env} if env else {}, {"x402": flags} if flags else {})
    got = (cfg.x402.mode, cfg.x402.enabled, cfg.x402.route_policy.tools_call.enabled)
    assert got == expected


@pytest.mark.parametrize(
    "x402",
    [
        pytest.param({"mode": "required", "enabled": False}, id="required-but-disabled"),
        pytest.param({"mode": "off", "enabled": True}, id="off-but-enabled"),
    ],
)
def test_x402_enabled_contradicting_the_mode_in_one_layer_is_config_invalid(x402):
    with pytest.raises(errors.Dir2mcpError) as caught:
        build_config({"x402": x402}, {}, {}, origin=".dir2mcp.yaml")
    assert caught.value.code == errors.CONFIG_INVALID and caught.value.exit_code == 2
    assert caught.value.message.startswith(".dir2mcp.yaml: x402.enabled is ")
    assert "x402.mode" in caught.value.hint


@pytest.mark.parametrize(
    "layer, expected",
    [
        pytest.param(
            {"mode": True},
            {"mode": True, "enabled": True, "route_policy": {"tools_call": {"enabled": True}}},
            id="yaml-bare-on-sells-tools-call",
        ),
        pytest.param({"mode": False}, {"mode": False, "enabled": False}, id="yaml-bare-off"),
        pytest.param({"enabled": False}, {"enabled": False, "mode": "off"}, id="disabled-alone"),
        pytest.param({"mode": "banana"}, {"mode": "banana"}, id="bad-word-left-to-pydantic"),
    ],
)
def test_one_layers_switches_are_made_consistent_before_merging(layer, expected):
    assert x402_config.layer_switches({"x402": layer}, "flags") == {"x402": expected}


def test_the_spec_template_loads_and_a_flag_turns_payments_on():
    template = yaml.safe_load(render_config(Config()))
    assert (
        template["x402"]["enabled"] is False
        and template["x402"]["route_policy"]["tools_call"]["enabled"] is False
    )
    assert build_config(template, {}, {}).x402.mode == "off"
    flags = {"x402": {"mode": "required", "enabled": True}}
    assert build_config(template, {}, flags).x402.route_policy.tools_call.enabled is True


def test_tools_call_disabled_means_nothing_is_sold(tmp_path):
    tools_call = {**COMPLETE["route_policy"]["tools_call"], "enabled": False}
    cfg = config("required", **{**COMPLETE, "route_policy": {"tools_call": tools_call}})
    assert cfg.x402.route_policy.tools_call.enabled is False
    with pytest.raises(errors.Dir2mcpError) as caught:
        gate_mod.from_config(cfg, tmp_path)
    assert caught.value.code == errors.CONFIG_INVALID and caught.value.exit_code == 2
    assert "x402.route_policy.tools_call.enabled is false" in caught.value.message
    events: list[dict] = []
    cfg = config("on", **{**COMPLETE, "route_policy": {"tools_call": tools_call}})
    assert gate_mod.from_config(cfg, tmp_path, emit=events.append) is None
    assert any("tools_call.enabled is false" in p for p in events[0]["data"]["problems"])
