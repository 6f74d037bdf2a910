"""The only package that imports ``docker`` (the Docker SDK for Python): the engine here, the
container spec in .spec, running and stopping containers in .containers, the engine's errors in
.errors.

Every docker error is turned into a kdkit error (:func:`docker_errors`), with the image and the
detail, so the rest of kdkit never sees docker's exception types:

* no engine answering -> :class:`Unavailable` (exit 3) saying how to start one;
* an image that is not on the engine -> :class:`Unavailable`, naming how to get it;
* the NVIDIA device driver missing -> :class:`Unavailable` quoting the error users
  otherwise meet (``could not select device driver "" with capabilities: [[gpu]]``);
* no docker-init for the containers' init (``--init``) -> :class:`Unavailable` with how to install
  it.

A container kdkit runs is always removed after, and stopped the way ``docker stop`` does when kdkit
is interrupted (:meth:`Engine.run`, :meth:`Engine.stop`, :class:`Running` for containers side by
side).

Images are never pulled implicitly: kdkit works on machines that reach no
registry, and a silent pull of a multi-GB base is not what a check should do.
:meth:`Engine.pull` exists for the one place that asks for it on purpose.

A container is described once, as a :class:`ContainerSpec` (:mod:`.spec`); :func:`sdk_arguments`
and :func:`cli_arguments` translate that one description for the SDK and for
the ``docker run`` command line, so ``kdkit run --print`` cannot drift from what
``kdkit run`` does.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from kdkit.core.errors import Unavailable
from kdkit.docker_adapter.containers import SIGNALLED, STOP_GRACE_S, ContainerRuns, Running, Stopped
from kdkit.docker_adapter.errors import NVIDIA_ERROR, NVIDIA_FIX, _one_line, docker_errors
from kdkit.docker_adapter.labelled import Labelled, labelled_containers
from kdkit.docker_adapter.spec import (
    ContainerSpec,
    Mount,
    cli_arguments,
    sdk_arguments,
    shell_line,
    split_reference,
)

__all__ = ["NVIDIA_ERROR", "NVIDIA_FIX", "SIGNALLED", "STOP_GRACE_S", "ContainerSpec", "Engine",
           "ImageFacts",
           "Labelled", "Mount", "Running", "Stopped", "cli_arguments", "connect", "docker_errors",
           "labelled_containers", "sdk_arguments", "shell_line", "split_reference"]

# Builds stream for many minutes without a byte (pip installing torch): a read timeout must not end
# them.
BUILD_TIMEOUT_S = 3 * 3600


@dataclass(frozen=True)
class ImageFacts:
    """What kdkit reads from an image: identity, labels, user, size, platform."""

    ref: str
    id: str
    labels: dict[str, str]
    user: str
    size: int
    tags: list[str]
    created: str
    # the engine's names: amd64, arm64, ppc64le ("" when the image does not say)
    architecture: str = ""
    os: str = ""  # linux, windows
    command: tuple[str, ...] = ()  # its own CMD, run when no command is given

    @property
    def platform(self) -> str:
        """``os/architecture`` as Docker writes a platform (``linux/amd64``), or "" when unknown."""
        return (f"{self.os}/{self.architecture}" if self.os and self.architecture else self.os
                or self.architecture)


class Engine(ContainerRuns):
    """A connection to the Docker engine; every method raises kdkit errors only."""

    def __init__(self, client: Any) -> None:
        self._client = client

    def info(self) -> dict[str, Any]:
        with docker_errors("engine"):
            data: dict[str, Any] = self._client.info()
        return data

    def runtimes(self) -> set[str]:
        """Names of the container runtimes the engine knows (``nvidia`` once the toolkit is set
        up)."""
        return set(self.info().get("Runtimes") or {})

    # ------------------------------------------------------------------ images

    def image(self, ref: str) -> ImageFacts | None:
        """The image ``ref`` on this engine, or None when it is not there."""
        import docker.errors

        with docker_errors(ref):
            try:
                attrs = self._client.api.inspect_image(ref)
            except docker.errors.ImageNotFound:
                return None
        config = attrs.get("Config") or {}
        return ImageFacts(ref, attrs["Id"], dict(config.get("Labels") or {}),
                          str(config.get("User") or ""),
                          int(attrs.get("Size") or 0), list(attrs.get("RepoTags") or []),
                          str(attrs.get("Created") or ""), str(attrs.get("Architecture") or ""),
                          str(attrs.get("Os") or ""), tuple(config.get("Cmd") or ()))

    def require_image(self, ref: str) -> ImageFacts:
        facts = self.image(ref)
        if facts is None:
            raise Unavailable(f"image {ref}: not on this Docker engine; build it (`kdkit build`) "
                              "or load it (`kdkit load` / `docker load`)")
        return facts

    def pull(self, ref: str) -> None:
        """Pull ``ref`` on purpose; Unavailable with the registry's answer when it cannot be had."""
        import docker.errors

        repository, tag = split_reference(ref)
        try:
            self._client.api.pull(repository, tag=tag)
        except docker.errors.DockerException as exc:
            raise Unavailable(f"image {ref}: not on this Docker engine and it cannot be pulled "
                              f"({_one_line(exc)}); `docker load` it or pass another "
                              "--base-image") from None

    def tag(self, image_id: str, ref: str) -> None:
        repository, tag = split_reference(ref)
        with docker_errors(ref):
            self._client.api.tag(image_id, repository, tag=tag)

    def remove_image(self, ref: str) -> None:
        import docker.errors

        with docker_errors(ref), contextlib.suppress(docker.errors.ImageNotFound):
            self._client.api.remove_image(ref, force=True)

    def build(self, context: IO[bytes], *, dockerfile: str, buildargs: Mapping[str, str],
              nocache: bool,
              network: str, labels: Mapping[str, str] | None = None) -> Iterator[dict[str, Any]]:
        """Stream the classic builder's decoded events for a prepared tar ``context``; nothing is
        tagged.

        ``labels`` are set on the image by the builder itself (values are never parsed as Dockerfile
        text).
        """
        with docker_errors("build"):
            stream = self._client.api.build(
                fileobj=context, custom_context=True, dockerfile=dockerfile,
                buildargs=dict(buildargs),
                nocache=nocache, rm=True, forcerm=True, pull=False, decode=True,
                network_mode=network,
                timeout=BUILD_TIMEOUT_S, labels=dict(labels) if labels else None)
            yield from stream

    def read_file(self, image: str, path: str, limit: int = 1 << 20) -> bytes | None:
        """The bytes of the regular file ``path`` in ``image``, or None when the image has no such
        file.

        Nothing of the image runs: a container is created (never started), the file is copied out
        of it (``docker cp``'s archive call) and the container removed. A file over ``limit`` bytes,
        or one that is not a regular file, is Unavailable.
        """
        import docker.errors

        with docker_errors(image):
            container = self._client.api.create_container(image, command=["/kdkit-never-started"],
                                                          network_disabled=True)
            try:
                try:
                    stream, stat = self._client.api.get_archive(container["Id"], path)
                except docker.errors.NotFound:
                    return None
                if int(stat.get("size") or 0) > limit:
                    raise Unavailable(f"image {image}: {path} is {stat.get('size')} bytes, over "
                                      f"the {limit} kdkit reads; rebuild the image with `kdkit "
                                      "build`")
                archive = bytearray()
                for chunk in stream:
                    archive += chunk
                    if len(archive) > limit + (64 << 10):  # the tar's own headers and padding
                        raise Unavailable(
                            f"image {image}: {path} is over the {limit} bytes kdkit reads")
            finally:
                with contextlib.suppress(Exception):  # already gone: nothing to clean
                    self._client.api.remove_container(container["Id"], force=True)
        return _only_file(bytes(archive), image, path)

    def save_image_chunks(self, ref: str, chunk_size: int = 1 << 20) -> Iterator[bytes]:
        """``docker save`` of ``ref`` as a stream of byte chunks: `kdkit bundle` compresses while it
        is still produced (a CUDA image is many GB: no uncompressed copy on disk)."""
        with docker_errors(ref):
            yield from self._client.api.get_image(ref, chunk_size=chunk_size)

    def load_image_chunks(self, chunks: Iterator[bytes], subject: str) -> list[str]:
        """``docker load`` from a stream of (uncompressed) archive chunks; return the tags (or ids)
        it brought.

        `kdkit load` decompresses on the way in: engines before Docker 25 cannot read a zstd
        archive."""
        with docker_errors(subject):
            messages: list[dict[str, Any]] = list(self._client.api.load_image(chunks, quiet=True))
        errors = [m.get("error") or m.get("errorDetail", {}).get("message") for m in messages
                  if m.get("error") or m.get("errorDetail")]
        if errors:
            raise Unavailable(f"{subject}: the Docker engine refused the archive: {errors[0]}")
        loaded = []
        for message in messages:
            stream = str(message.get("stream", "")).strip()
            loaded += [stream[len(p):] for p in ("Loaded image: ", "Loaded image ID: ")
                       if stream.startswith(p)]
        return loaded

def _only_file(archive: bytes, image: str, path: str) -> bytes:
    """The one regular file of a ``get_archive`` tar; Unavailable for a folder, a link or a bad
    tar."""
    import io
    import tarfile

    try:
        with tarfile.open(fileobj=io.BytesIO(archive), mode="r:") as tar:
            members = tar.getmembers()
            if len(members) != 1 or not members[0].isfile():
                raise Unavailable(f"image {image}: {path} is not a regular file; rebuild the image "
                                  "with `kdkit build`")
            handle = tar.extractfile(members[0])
            assert handle is not None  # a regular file always has one
            return handle.read()
    except tarfile.TarError as exc:
        raise Unavailable(
            f"image {image}: the engine's copy of {path} is not a readable tar ({exc})") from None


def connect(timeout: float = 60) -> Engine:
    """The engine named by the environment (DOCKER_HOST, the active context); Unavailable when none
    answers."""
    import docker

    with docker_errors("engine"):
        client = docker.from_env(timeout=timeout)
        client.ping()
    return Engine(client)


def run_to_completion(image: str, command: Sequence[str], mounts: Sequence[tuple[Path, str, str]],
                      env: Mapping[str, str], network: str | None = None,
                      workdir: str | None = None) -> tuple[int, str]:
    """Run ``command`` in a throw-away container of a LOCAL ``image``; return (exit code, logs)
    (`kdkit lock --in-container`).

    ``mounts`` are (host path, container path, "ro" | "rw") bind mounts. The image is
    never pulled (see the module's docstring).
    """
    engine = connect()
    engine.require_image(image)
    spec = ContainerSpec(
        image=image, command=list(command), network=network or "bridge", workdir=workdir,
        mounts=[Mount(host, inside, mode == "ro") for host, inside, mode in mounts],
        extra_env=dict(env))
    output: list[bytes] = []
    code = engine.run(spec, output.append)
    return code, b"".join(output).decode("utf-8", errors="replace")
