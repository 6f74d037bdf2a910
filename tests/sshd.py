"""A real OpenSSH server on 127.0.0.1 for the copy tests (no mock SSH, no mock rclone).

``SshServer.start(folder)`` makes a throwaway host key and user key (ssh-keygen), writes its own sshd_config (a free
non-standard port, no PAM, ``StrictModes no``, root by key only, ``AuthorizedKeysFile`` the test's file) and starts
``sshd -D``; the client side is an ssh config file (``KDKIT_SSH_CONFIG``, read by kdkit as ``ssh -F``) naming the
port, the key and a known_hosts file that already trusts the host key, and an rclone config whose ``sftp`` remote
reaches the same server with the same key. The target user is root (the CI user); a test that is not root is
skipped with the reason.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

HOST = "127.0.0.1"
TOOLS = ("sshd", "ssh", "ssh-keygen", "sftp", "rsync", "rclone")


def missing_tools() -> list[str]:
    found = [shutil.which(t) or (Path("/usr/sbin") / t).is_file() for t in TOOLS]
    return [tool for tool, there in zip(TOOLS, found, strict=True) if not there]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(path)], check=True)


@dataclass
class SshServer:
    folder: Path
    port: int
    process: subprocess.Popen[bytes]
    user_key: Path
    client_config: Path
    rclone_config: Path
    alias: str = "kdtest"

    @property
    def target(self) -> str:
        return f"root@{HOST}"

    def ssh(self, script: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["ssh", "-F", str(self.client_config), self.target, script],
                              capture_output=True,
                              text=True, timeout=60, check=False)

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()

    @classmethod
    def start(cls, folder: Path) -> SshServer:
        folder.mkdir(parents=True, exist_ok=True)
        host_key, user_key = folder / "host_key", folder / "user_key"
        _keygen(host_key)
        _keygen(user_key)
        authorized = folder / "authorized_keys"
        authorized.write_text((folder / "user_key.pub").read_text())
        port = free_port()
        config = folder / "sshd_config"
        config.write_text(f"Port {port}\nListenAddress {HOST}\nHostKey {host_key}\nUsePAM "
                          "no\nStrictModes no\nPermitRootLogin "
                          "prohibit-password\nPasswordAuthentication "
                          "no\nKbdInteractiveAuthentication no\nAuthorizedKeysFile "
                          f"{authorized}\nPidFile {folder / 'sshd.pid'}\nSubsystem sftp "
                          "internal-sftp\nLogLevel ERROR\n")
        Path("/run/sshd").mkdir(exist_ok=True)
        sshd = shutil.which("sshd") or "/usr/sbin/sshd"
        process = subprocess.Popen([sshd, "-D", "-e", "-f", str(config)],
                                   stderr=(folder / "sshd.log").open("wb"))
        known = folder / "known_hosts"
        known.write_text(f"[{HOST}]:{port} "
                         f"{(folder / 'host_key.pub').read_text().split(' ', 2)[0]} "
                         f"{(folder / 'host_key.pub').read_text().split(' ', 2)[1]}\n")
        client = folder / "ssh_config"
        client.write_text(f"Host {HOST} kdtest\n  HostName {HOST}\n  Port {port}\n  User root\n"
                          f"  IdentityFile {user_key}\n  IdentitiesOnly yes\n  UserKnownHostsFile "
                          f"{known}\n  StrictHostKeyChecking yes\n")
        rclone = folder / "rclone.conf"
        rclone.write_text(f"[kdsftp]\ntype = sftp\nhost = {HOST}\nport = {port}\nuser = root\n"
                          f"key_file = {user_key}\nknown_hosts_file = {known}\nshell_type = unix\n"
                          "md5sum_command = md5sum\nsha1sum_command = sha1sum\n\n[kdlocal]\ntype = "
                          "local\n")
        server = cls(folder, port, process, user_key, client, rclone)
        _wait_ready(server)
        return server


def _wait_ready(server: SshServer) -> None:
    for _ in range(100):
        if server.process.poll() is not None:
            raise RuntimeError(f"sshd ended: {(server.folder / 'sshd.log').read_text()}")
        try:
            with socket.create_connection((HOST, server.port), timeout=1):
                return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("sshd did not start listening")


def running_as_root() -> bool:
    return os.geteuid() == 0
