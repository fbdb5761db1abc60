"""Where a server is probed and with which key (`deploy.services.endpoint`, issue 31: 4, 5)."""

from __future__ import annotations

from deploy import masking
from deploy.config.services import ServiceSpec
from deploy.services.endpoint import (
    Endpoint,
    api_key_of,
    endpoint_of,
    endpoint_of_state,
    listen_address,
    probe_address,
)
from deploy.services.state import ServiceState

SERVER = ["python3", "-m", "sglang.launch_server", "--model-path", "m", "--port", "30000"]


def test_a_wildcard_means_loopback_a_bound_address_is_itself() -> None:
    assert probe_address("0.0.0.0") == "127.0.0.1"
    assert probe_address("::") == "::1" and probe_address("[::]") == "::1"
    assert probe_address("127.0.0.7") == "127.0.0.7"
    assert listen_address(["127.0.0.7:30000"], 30000) == "127.0.0.7"
    assert listen_address(["[::]:30000", "0.0.0.0:30000"], 30000) == "127.0.0.1"
    assert listen_address(["[::1]:30000"], 30000) == "::1"
    assert listen_address(["127.0.0.7:40000"], 30000) is None


def test_sockets_first_then_host_flag_then_the_service_address() -> None:
    spec = ServiceSpec()
    bound = ServiceState(
        running=True, argv=[*SERVER, "--host", "0.0.0.0"], listen=["127.0.0.7:30000"]
    )
    assert endpoint_of_state(spec, bound).address == "127.0.0.7"
    assert endpoint_of(spec, argv=[*SERVER, "--host", "127.0.0.9"]).address == "127.0.0.9"
    assert endpoint_of(spec, argv=[*SERVER, "--host=0.0.0.0"]).address == "127.0.0.1"
    assert endpoint_of(spec, argv=SERVER).address == "127.0.0.1", "SGLang's default --host"
    assert endpoint_of(ServiceSpec(address="127.0.0.5")).address == "127.0.0.5"
    assert Endpoint("::1", 30000).where() == "[::1]:30000"


def test_the_key_is_the_servers_own_else_the_inventory_secret_and_is_masked() -> None:
    assert api_key_of([*SERVER, "--api-key", "sk-from-argv"], {}) == "sk-from-argv"
    assert api_key_of([*SERVER, "--api-key=sk-eq"], {}) == "sk-eq"
    assert api_key_of(SERVER, {"SGLANG_API_KEY": "sk-from-env"}) == "sk-from-env"
    assert api_key_of(SERVER, {}) is None
    spec = ServiceSpec(api_key="sk-inventory-secret")
    assert endpoint_of(spec, argv=SERVER).api_key == "sk-inventory-secret"
    own = endpoint_of(spec, argv=[*SERVER, "--api-key", "sk-running-server-own"])
    assert own.api_key == "sk-running-server-own", "what the server enforces comes first"
    assert own.headers() == {"Authorization": "Bearer sk-running-server-own"}
    assert "sk-running-server-own" not in repr(own)
    assert masking.mask("Bearer sk-running-server-own") == f"Bearer {masking.MASK}"
    assert endpoint_of(ServiceSpec(api_key=""), argv=SERVER).headers() == {}
