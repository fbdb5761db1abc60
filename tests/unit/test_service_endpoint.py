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
    listening,
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


PROC_NET_TCP = """\
  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0700007F:7530 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 9041361 1 0 100 0 0 10 0
   1: 0100007F:0016 0100007F:D2F0 01 00000000:00000000 00:00000000 00000000     0        0 9034216 1 0 100 0 0 10 0
   2: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 9034217 1 0 100 0 0 10 0
  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:7531 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0 100 0 0 10 0
   1: 00000000000000000000000000000000:7532 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1 0 100 0 0 10 0
"""


def test_listening_reads_both_tables_and_only_listeners() -> None:
    """``/proc/net/tcp{,6}`` as the kernel writes them: little-endian words, state 0A only
    (the established ssh connection on line 1 is not a listener)."""
    assert listening(PROC_NET_TCP) == [
        "127.0.0.7:30000",
        "0.0.0.0:8080",
        "[::1]:30001",
        "[::]:30002",
    ]
    assert listen_address(listening(PROC_NET_TCP), 30000) == "127.0.0.7"
    assert listen_address(listening(PROC_NET_TCP), 30002) == "::1"
    assert listening("garbage\n 0: zz:zz 0:0 0A\n") == []
