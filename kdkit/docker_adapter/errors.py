"""The engine's errors as kdkit errors (:func:`docker_errors`), each with the fix users need: no
engine answering, an image that is not there, a GPU the engine cannot give, an init it does not
have. Re-exported by
:mod:`kdkit.docker_adapter`."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from kdkit.core.errors import Unavailable

ENGINE_FIX = (
    "start it (`sudo systemctl start docker`, or `make engine` in a kdkit checkout) or set "
    "DOCKER_HOST")
NVIDIA_ERROR = 'could not select device driver "" with capabilities: [[gpu]]'
NVIDIA_FIX = ("install the NVIDIA Container Toolkit, then `sudo nvidia-ctk runtime configure "
              "--runtime=docker && sudo systemctl restart docker`")


def _one_line(exc: BaseException) -> str:
    text = str(getattr(exc, "explanation", None) or exc).strip()
    return " ".join(text.split()) or type(exc).__name__


INIT_FIX = ("kdkit runs every container with Docker's --init (docker-init, which is tini: "
            "https://docs.docker.com/reference/cli/docker/container/run/#init); install it (Debian "
            "and Ubuntu: the tini package, which docker.io depends on; Docker CE ships "
            "docker-init) or set \"init-path\" in /etc/docker/daemon.json, then restart the engine")


@contextlib.contextmanager
def docker_errors(subject: str, *, init: bool = False) -> Iterator[None]:
    """Turn docker and transport errors raised inside the block into kdkit errors about ``subject``;
    ``init``: a container with an init is started in the block (an engine without docker-init
    refuses it)."""
    import docker.errors
    import requests.exceptions

    try:
        yield
    except docker.errors.ImageNotFound:
        raise Unavailable(f"image {subject}: not on this Docker engine; build it (`kdkit build`), "
                          "load it (`kdkit load` / `docker load`) or pull it") from None
    except docker.errors.APIError as exc:
        detail = _one_line(exc)
        # the engine's own words, quoted (NVIDIA_ERROR)
        if "could not select device driver" in detail:
            raise Unavailable(f"{subject}: the Docker engine cannot give the container a GPU "
                              f"({detail}): its NVIDIA Container Toolkit is missing or broken; "
                              f"{NVIDIA_FIX}") from None
        # moby: exec.LookPath("docker-init") when HostConfig.Init is set
        if init and "docker-init" in detail:
            raise Unavailable(f"{subject}: the Docker engine has no init to run the container with "
                              f"({detail}); {INIT_FIX}") from None
        raise Unavailable(f"{subject}: the Docker engine refused: {detail}") from None
    except (requests.exceptions.ConnectionError, docker.errors.DockerException) as exc:
        address = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
        raise Unavailable(f"Docker engine not reachable at {address} ({_one_line(exc)}); "
                          f"{ENGINE_FIX}") from None
