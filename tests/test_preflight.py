"""The checks ``up`` makes before anything is written: who may serve without
a token, and x402's start-up verdict."""

from __future__ import annotations

import pytest

from kernel import errors
from kernel.config import Config, build_config
from mcp_gateway import listen, preflight
from tests.x402_client import BASE_SEPOLIA, PAY_TO


@pytest.mark.parametrize(
    ("spec", "listen_at", "public", "refused"),
    [
        pytest.param("none", "127.0.0.1:0", False, False, id="none-on-loopback"),
        pytest.param("none", "[::1]:8080", False, False, id="none-on-v6-loopback"),
        pytest.param("none", "localhost:0", False, False, id="none-on-localhost"),
        pytest.param("none", "0.0.0.0:0", False, True, id="none-on-every-interface"),
        pytest.param("none", "192.0.2.7:8080", False, True, id="none-on-an-address"),
        pytest.param("none", "127.0.0.1:0", True, True, id="none-with-public"),
        pytest.param("auto", "0.0.0.0:0", True, False, id="token-on-every-interface"),
        pytest.param("file:/t", "192.0.2.7:8080", False, False, id="token-file-on-an-address"),
    ],
)
def test_auth_none_is_refused_beyond_loopback(spec, listen_at, public, refused):
    server = build_config({"server": {"listen": listen_at, "public": public}}, {}, {}).server
    address = listen.serving_address(server)
    if not refused:
        assert preflight.check_reach(spec, address, public=public) is None
        return
    with pytest.raises(errors.Dir2mcpError) as caught:
        preflight.check_reach(spec, address, public=public)
    assert caught.value.code == errors.CONFIG_INVALID and "--auth none is refused" in caught.value.message


def test_public_serves_every_interface_on_the_same_port():
    server = build_config({"server": {"listen": "127.0.0.1:8080", "public": True}}, {}, {}).server
    assert listen.serving_address(server) == listen.ListenAddress("0.0.0.0", 8080)


COMPLETE = {
    "facilitator_url": "http://127.0.0.1:9/facilitator",
    "resource_base_url": "https://files.example",
    "route_policy": {"tools_call": {"price": "$0.002", "network": BASE_SEPOLIA, "pay_to": PAY_TO}},
}


@pytest.mark.parametrize(
    ("x402", "warned"),
    [
        pytest.param({"mode": "off"}, False, id="off"),
        pytest.param({"mode": "on", **COMPLETE}, False, id="on-complete"),
        pytest.param({"mode": "required", **COMPLETE}, False, id="required-complete"),
        pytest.param({"mode": "on"}, True, id="on-incomplete"),
    ],
)
def test_payments_warn_only_when_on_serves_free(x402, warned):
    warning = preflight.payments_warning(build_config({"x402": x402}, {}, {}))
    assert (warning is not None) is warned
    if warned:
        assert warning.startswith("x402 mode 'on' but payments are NOT enforced (tools are free): ")


def test_required_without_a_complete_policy_is_refused():
    with pytest.raises(errors.Dir2mcpError) as caught:
        preflight.payments_warning(build_config({"x402": {"mode": "required"}}, {}, {}))
    assert caught.value.code == errors.CONFIG_INVALID
    assert "x402 mode 'required' needs a complete payment configuration" in caught.value.message


def test_payments_off_by_default():
    assert preflight.payments_warning(Config()) is None
