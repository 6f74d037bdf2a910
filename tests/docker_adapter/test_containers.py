"""ContainerRuns against the real engine: the exit code of an ended container when the engine fails
the calls that usually give it (loaded CI run 10 saw both `wait` requests fail after an interrupt,
and the run's report said `container_exit_code: null`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kdkit.docker_adapter import ContainerSpec, Engine, connect
from tests.conftest import BASE
from tests.engineproxy import RefusingProxy

WAIT = rb"^POST /v[0-9.]+/containers/[0-9a-f]+/wait"


@pytest.fixture
def refusing_waits(docker_engine: None) -> Iterator[tuple[Engine, RefusingProxy]]:
    """An engine whose every `wait` fails (HTTP 500), every other call answered by the real one."""
    import docker

    with RefusingProxy(WAIT) as proxy:
        yield Engine(docker.DockerClient(base_url=proxy.url, timeout=60)), proxy


def _started(command: str) -> str:
    return connect().start(ContainerSpec(image=BASE, command=["sh", "-c", command]))[0]


def test_when_both_waits_fail_the_code_comes_from_the_engines_record_of_the_ended_container(
        refusing_waits: tuple[Engine, RefusingProxy]) -> None:
    container_id = _started("exit 7")
    real = connect()
    try:
        assert real._client.api.wait(container_id, timeout=120)["StatusCode"] == 7  # it has ended
        engine, proxy = refusing_waits
        assert engine._exit_code(container_id) == 7
        assert proxy.refused == 2  # both waits were asked, and both failed
    finally:
        real.remove_container(container_id)


def test_a_container_still_running_when_both_waits_fail_has_no_code(
        refusing_waits: tuple[Engine, RefusingProxy]) -> None:
    container_id = _started("sleep 600")
    real = connect()
    try:
        engine, proxy = refusing_waits
        assert engine._exit_code(container_id) is None  # running: the record's 0 is no verdict
        assert proxy.refused == 2
        assert real._client.api.inspect_container(container_id)["State"]["Running"]
    finally:
        real.remove_container(container_id)


def test_with_the_waits_answered_the_code_is_the_waits(docker_engine: None) -> None:
    container_id = _started("exit 3")
    real = connect()
    try:
        assert real._exit_code(container_id) == 3
    finally:
        real.remove_container(container_id)
