"""Running containers to their end, and stopping them as ``docker stop`` does, for
:class:`kdkit.docker_adapter.Engine` (:class:`ContainerRuns`); :class:`Running` for the containers
of one command side by side;
:class:`Stopped` when the stop ended one. Re-exported by :mod:`kdkit.docker_adapter`."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from kdkit.core.errors import Interrupted
from kdkit.core.stopsignals import HungUp, deferred_stops
from kdkit.docker_adapter.errors import docker_errors
from kdkit.docker_adapter.spec import ContainerSpec, sdk_arguments

# docker stop's grace, SIGTERM to SIGKILL, when kdkit stops its containers: the pilot closes its run
# folder within a second of SIGTERM (it kills its app's process, then writes stop.json, the summary,
# SHA256SUMS: kdkit.probe.pilot.stopguard); 30 s leaves room on a loaded machine. Docker's own
# default is 10 s (https://docs.docker.com/reference/cli/docker/container/stop/).
STOP_GRACE_S = 30
# A container the stop ended exits as a signal ends a process, 128 + N (143: SIGTERM, through the
# pilot or the init; 137: SIGKILL after the grace); below that, its exit code is its own verdict.
SIGNALLED = 128


def _timeouts() -> tuple[type[BaseException], ...]:
    """What the SDK raises when an engine call outlives its timeout (requests, over TCP or the unix
    socket)."""
    import requests.exceptions

    return requests.exceptions.Timeout, requests.exceptions.ConnectionError


class Stopped(Interrupted):
    """The stop ended the container (it was running when SIGTERM reached it, and it exited as a
    signal ends a process): ``container_exit`` is its exit code (143 at once, 137 when killed after
    the grace)."""

    def __init__(self, signum: int | None, container_exit: int | None) -> None:
        super().__init__(signum)
        self.container_exit = container_exit


class Running:
    """The containers of one kdkit command side by side, so one stop reaches each of them; a
    container that starts while the stop is under way stops itself (:meth:`Engine.run`)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ids: set[str] = set()
        self.stopping = False
        self.signum = 2  # the signal that began the stop (SIGINT by default)

    def add(self, container_id: str) -> bool:
        """Register a started container; False once a stop has begun (then it must stop itself)."""
        with self._lock:
            if not self.stopping:
                self._ids.add(container_id)
            return not self.stopping

    def discard(self, container_id: str) -> None:
        with self._lock:
            self._ids.discard(container_id)

    def begin_stop(self, signum: int) -> list[str]:
        """From now on no container of this group runs on; the ones running now, to stop."""
        with self._lock:
            self.stopping, self.signum = True, signum
            return sorted(self._ids)


class ContainerRuns:
    """The container part of the engine: ``_client`` is the Docker SDK's client
    (kdkit.docker_adapter.Engine)."""

    _client: Any

    def run(self, spec: ContainerSpec, on_output: Callable[[bytes], None] | None = None,
            running: Running | None = None) -> int:
        """Run ``spec`` to completion, streaming its output; return its exit code. The container is
        removed.

        An interrupt in this thread (Ctrl-C, or kdkit's SIGTERM handler) stops the container the way
        ``docker stop`` does (SIGTERM, :data:`STOP_GRACE_S`, SIGKILL), shows what it printed
        meanwhile and raises on; a second one ends the grace at once. Whether the run was stopped is
        judged from the container's end, not from the signal: one that had ended on its own, or that
        the stop found ending with its verdict (an exit code below 128), returns that code. The
        create is never cut by a signal (it waits until the container is known), so no created
        container is left behind. ``running`` registers the container with the others of one
        command, which
        :func:`stop` reaches from another thread.
        """
        container, code, kept = None, None, False
        with docker_errors(spec.image, init=spec.init):
            try:
                if running is not None and running.stopping:
                    raise Interrupted(running.signum)  # the stop came before this one was made
                with deferred_stops():
                    container = self._client.containers.create(**sdk_arguments(spec))
                container.start()
                # from here a hangup leaves it running (before, it was never started: removed)
                kept = True
                if running is not None and not running.add(container.id):
                    self.stop([container.id])  # the stop came while it started: it stops itself
                code = self._follow(container, on_output)
                kept = False
            except HungUp:
                # the connection is gone, not the run: a started container runs on to its verdict
                raise
            except BaseException:
                kept = False
                raise
            finally:
                if container is not None and not kept:
                    if running is not None:
                        running.discard(container.id)
                    self._remove(container, ended=code is not None)
        assert code is not None  # _follow returned it, or raised
        return code

    def start(self, spec: ContainerSpec) -> tuple[str, str]:
        """Create and start ``spec`` and return at once (``kdkit run --detach``): (its ID, its
        name). It is not removed when it ends, so its exit code waits for ``kdkit wait``, which
        removes it."""
        with docker_errors(spec.image, init=spec.init), deferred_stops():
            container = self._client.containers.create(**sdk_arguments(spec))
            try:
                container.start()
            except BaseException:
                with contextlib.suppress(Exception):
                    container.remove(force=True)
                raise
        return str(container.id), str(container.name)

    def remove_container(self, container_id: str) -> None:
        """Remove an ended container (gone already: nothing to do)."""
        with deferred_stops(), contextlib.suppress(Exception):
            self._client.api.remove_container(container_id, force=True)

    def logs(self, container_id: str, follow: bool) -> Any:
        """The container's output as chunks of bytes, as it comes when ``follow``; Unavailable when
        it is gone."""
        import docker.errors

        from kdkit.core.errors import Unavailable

        try:
            if follow:
                return self._client.api.logs(container_id, stream=True, follow=True,
                                             stdout=True, stderr=True)
            return iter([self._client.api.logs(container_id, stdout=True, stderr=True)])
        except docker.errors.NotFound:
            raise Unavailable(f"container {container_id}: gone (removed)") from None

    @staticmethod
    def _remove(container: Any, ended: bool) -> None:
        """Remove a container whole; a stop signal meanwhile waits for it, and stops nothing once it
        has ``ended``."""
        try:
            with deferred_stops(), contextlib.suppress(Exception):  # already gone: nothing to clean
                container.remove(force=True)
        except KeyboardInterrupt:
            if not ended:
                raise

    def _follow(self, container: Any, on_output: Callable[[bytes], None] | None) -> int:
        seen = 0
        try:
            for chunk in container.logs(stream=True, follow=True, stdout=True, stderr=True):
                seen += len(chunk)
                if on_output is not None:
                    on_output(chunk)
            code = int(container.wait().get("StatusCode", 1))
        except HungUp:
            raise
        except KeyboardInterrupt as stop:
            reached = self.stop([container.id])
            ended = self._exit_code(container.id)
            self._rest(container, seen, on_output)
            if ended is None or (reached and ended >= SIGNALLED):
                raise Stopped(getattr(stop, "signum", None), ended) from None
            return ended  # it had ended on its own, or ended with its verdict: that is the answer
        with contextlib.suppress(KeyboardInterrupt):  # it has ended: a stop now stops nothing
            # the follow stream can end before the last partial line
            self._rest(container, seen, on_output)
        return code

    def _exit_code(self, container_id: str) -> int | None:
        """The exit code of an ended container; None when the engine cannot say. Asked twice: an
        interrupt that cut the log stream mid-read can leave a broken connection that fails the
        first request (the pool opens another). If both fail, the engine's record of an ended
        container holds the code too (a loaded engine once failed both waits)."""
        for _attempt in range(2):
            with contextlib.suppress(Exception):
                return int(
                    self._client.api.wait(container_id, timeout=STOP_GRACE_S).get("StatusCode"))
        with contextlib.suppress(Exception):
            state = self._client.api.inspect_container(container_id)["State"]
            if not state["Running"]:
                return int(state["ExitCode"])
        return None

    @staticmethod
    def _rest(container: Any, seen: int, on_output: Callable[[bytes], None] | None) -> None:
        rest = b""
        with contextlib.suppress(Exception):  # gone already: its output was seen
            rest = container.logs(stdout=True, stderr=True)[seen:]
        if rest and on_output is not None:
            on_output(rest)

    def stop(self, container_ids: Sequence[str], grace_s: float = STOP_GRACE_S) -> list[str]:
        """``docker stop`` for all of them at once: SIGTERM now, SIGKILL to any still running after
        ``grace_s`` (or at a second interrupt); returns once each has ended or been killed. Gone
        ones are skipped. Returns those the SIGTERM reached (running then: the engine refuses to
        signal a container that has ended)."""
        import docker.errors

        reached = []
        for container_id in container_ids:
            with contextlib.suppress(docker.errors.APIError):  # not running, or removed meanwhile
                self._client.api.kill(container_id, signal="SIGTERM")
                reached.append(container_id)
        deadline = time.monotonic() + grace_s
        try:
            for container_id in container_ids:
                # timed out: killed below
                with contextlib.suppress(docker.errors.APIError, *_timeouts()):
                    self._client.api.wait(container_id,
                                          timeout=max(0.1, deadline - time.monotonic()))
        finally:  # past the grace, or a second interrupt that will not wait for it
            for container_id in container_ids:
                with contextlib.suppress(docker.errors.APIError):  # ended: nothing to kill
                    self._client.api.kill(container_id, signal="SIGKILL")
        return reached
