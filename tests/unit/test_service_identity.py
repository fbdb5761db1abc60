"""Which manager runs a server, read from its real /proc/PID/cgroup (issue 31: points 2, 3, 9),
and the servers deploy refuses before touching anything: containers and multi-node ones."""

from __future__ import annotations

from pathlib import Path

import pytest

from deploy.config.services import ServiceSpec
from deploy.services.identity import container_of, server_unit, unit_of, unsupported
from deploy.services.state import ServiceState

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "cgroup"
SERVER = ["python3", "-m", "sglang.launch_server", "--model-path", "m", "--port", "30000"]


def cgroup(name: str) -> str:
    return (FIXTURES / name).read_text()


@pytest.mark.parametrize(
    ("fixture", "unit", "container"),
    [
        ("unit-v2.txt", "sglang.service", None),
        ("unit-v1.txt", "sglang.service", None),
        ("user-unit.txt", None, None),
        ("session-v2.txt", None, None),
        ("session-v1.txt", None, None),
        ("docker-v2.txt", None, "docker"),
        ("docker-v1.txt", None, "docker"),
        ("containerd-k8s.txt", None, "Kubernetes"),
        ("podman.txt", None, "podman"),
    ],
)
def test_unit_and_container_from_real_cgroup_contents(
    fixture: str, unit: str | None, container: str | None
) -> None:
    text = cgroup(fixture)
    assert unit_of(text) == unit
    assert container_of(text) == container


def running(argv: list[str], cgroup_text: str = "") -> ServiceState:
    return ServiceState(running=True, pid=42, argv=argv, cgroup=cgroup_text)


def test_containers_and_multi_node_servers_are_refused_in_one_line() -> None:
    spec = ServiceSpec()
    docker = unsupported(running(SERVER, cgroup("docker-v2.txt")), spec)
    assert docker is not None and "runs in a docker container" in docker and "\n" not in docker
    proxy = unsupported(running(["/usr/bin/docker-proxy", "-proto", "tcp"]), spec)
    assert proxy is not None and "docker container" in proxy
    nodes = unsupported(running([*SERVER, "--nnodes", "2", "--node-rank", "0"]), spec)
    assert nodes is not None and "one of 2 nodes (--nnodes 2)" in nodes
    assert unsupported(running([*SERVER, "--nnodes", "1"], cgroup("session-v2.txt")), spec) is None
    in_unit = unsupported(running(SERVER, cgroup("unit-v2.txt")), spec)
    assert in_unit is not None and "systemd unit sglang.service" in in_unit
    assert unsupported(ServiceState(running=False), spec) is None


def test_a_units_server_is_not_signalled_by_the_process_manager() -> None:
    """systemd runs it (the unit's real cgroup): refused, naming the unit to set. A server in
    the same unit as deploy's own login (a host without pam_systemd keeps logins in
    ssh.service) was started from a login, and is the process manager's."""
    spec = ServiceSpec()
    unit = ServiceState(running=True, pid=7, argv=SERVER, cgroup=cgroup("unit-v2.txt"))
    unit.helper_cgroup = cgroup("session-v2.txt")
    problem = unsupported(unit, spec)
    assert problem is not None and "run by the systemd unit sglang.service" in problem
    assert "manager: systemd and unit: sglang.service" in problem
    same = ServiceState(
        running=True,
        pid=7,
        argv=SERVER,
        cgroup="0::/system.slice/ssh.service\n",
        helper_cgroup="0::/system.slice/ssh.service\n",
    )
    assert unsupported(same, spec) is None
    systemd = ServiceSpec(manager="systemd", unit="sglang.service")
    assert unsupported(unit, systemd) is None
    assert unsupported(unit, ServiceSpec(manager="auto")) is None
    assert "sglang_manager=systemd" in problem and "\n" not in problem


@pytest.mark.parametrize("fixture", ["unit-v2.txt", "unit-v1.txt"])
def test_the_unit_is_found_from_real_cgroups_of_both_layouts(fixture: str) -> None:
    """What `manager: auto` switches on (`ServiceControl.detect_unit`)."""
    state = running(SERVER, cgroup(fixture))
    state.helper_cgroup = cgroup("session-v1.txt")
    assert server_unit(state) == "sglang.service"
    assert server_unit(running(SERVER, cgroup("session-v2.txt"))) is None
    assert server_unit(running(SERVER, cgroup("docker-v2.txt"))) is None
