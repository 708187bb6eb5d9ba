"""Keys for validate's SSH: the nodes' host keys (known_hosts) and ours (ssh-agent, ssh.key_file).

Host keys are checked strictly against a known_hosts file; a new key is accepted only with
`accept_new=True`, and then written to that file and recorded. known_hosts is read once per run
and indexed by name: paramiko's SSHClient parses the whole file, building a key object per line,
on every connection, which is quadratic in the cluster size (12 ms per connection at 16 lines
here, bench/ssh_profile.py). The server's key is compared by its wire bytes, as OpenSSH does
(sshkey_equal), so no key object is built for lines that are never asked about.

Key auth only: the keys of a running ssh-agent first (as OpenSSH does), then `ssh.key_file`
(asking for its passphrase on a terminal); ~/.ssh keys are never guessed at and the agent is
never forwarded.
"""

from __future__ import annotations

import base64
import binascii
import getpass
import hashlib
import hmac
import os
import threading
from pathlib import Path

import paramiko

from gpuforge.common.errors import InputError
from gpuforge.common.results import atomic_write
from gpuforge.validate.inventory import SshConfig


def fingerprint(key: paramiko.PKey) -> str:
    """The key's fingerprint as OpenSSH prints it (`ssh-keygen -lf`, sshkey_fingerprint SHA256)."""
    return fingerprint_blob(key.asbytes())


def fingerprint_blob(blob: bytes) -> str:
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def known_hosts_name(host: str, port: int) -> str:
    """How known_hosts (and `ssh-keygen -R`) names a host: `[host]:port` off port 22."""
    return host if port == 22 else f"[{host}]:{port}"


class HostKeyMismatch(Exception):
    """The node sent a key other than the one known_hosts has for it (possible impersonation)."""

    def __init__(self, name: str, sent: paramiko.PKey, expected_type: str, expected_blob: bytes) -> None:
        super().__init__(f"host key for {name} does not match known_hosts")
        self.name, self.sent, self.expected_type, self.expected_blob = name, sent, expected_type, expected_blob


class HostKeyUnknown(Exception):
    """known_hosts has no key for this node and new keys are not accepted."""


class KnownHosts:
    """known_hosts parsed once: plain names in a dict, hashed (|1|salt|hash) names in a list."""

    def __init__(self, path: Path, accept_new: bool) -> None:
        self.path, self.accept_new = path, accept_new
        self.accepted: list[dict[str, str]] = []
        self._lock = threading.Lock()
        self._plain: dict[str, list[tuple[str, bytes]]] = {}
        self._hashed: list[tuple[bytes, bytes, str, bytes]] = []  # salt, digest, key type, blob
        self._revoked: set[bytes] = set()
        if path.is_file():
            for line in path.read_text(errors="replace").splitlines():
                self._add_line(line)

    def _add_line(self, line: str) -> None:
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            return
        marker = fields.pop(0) if fields[0].startswith("@") else None
        if len(fields) < 3:
            return
        names, kind, b64 = fields[:3]
        try:
            blob = base64.b64decode(b64, validate=True)
        except (binascii.Error, ValueError):
            return
        if marker == "@revoked":
            self._revoked.add(blob)
            return
        if marker is not None:  # @cert-authority: not supported (paramiko did not either)
            return
        for name in names.split(","):
            if name.startswith("|1|"):
                try:
                    salt, digest = (base64.b64decode(p) for p in name[3:].split("|", 1))
                except (binascii.Error, ValueError):
                    continue
                self._hashed.append((salt, digest, kind, blob))
            else:
                self._plain.setdefault(name, []).append((kind, blob))

    def _entries(self, name: str) -> list[tuple[str, bytes]]:
        found = list(self._plain.get(name, []))
        for salt, digest, kind, blob in self._hashed:
            if hmac.compare_digest(hmac.new(salt, name.encode(), hashlib.sha1).digest(), digest):
                found.append((kind, blob))
        return found

    def preferred_types(self, name: str) -> list[str]:
        """Host key algorithms to ask for first: the types on file for this name (as SSHClient and
        OpenSSH do), so a node that also has a key of another type is not taken for an impostor."""
        with self._lock:
            kinds = dict.fromkeys(k for k, _ in self._entries(name))
        out: list[str] = []
        for k in kinds:
            out += ["rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"] if k == "ssh-rsa" else [k]
        return out

    def check(self, name: str, key: paramiko.PKey) -> None:
        """Return if `key` is `name`'s known key (or a first key, accepted and recorded); raise
        HostKeyMismatch / HostKeyUnknown otherwise. Like OpenSSH: a key of another type than
        the ones on file is a mismatch too when the name is known."""
        blob, kind = key.asbytes(), key.get_name()
        if blob in self._revoked:
            raise HostKeyMismatch(name, key, kind, blob)
        with self._lock:
            entries = self._entries(name)
            if any(k == kind and b == blob for k, b in entries):
                return
            if entries:
                same = [e for e in entries if e[0] == kind] or entries
                raise HostKeyMismatch(name, key, same[0][0], same[0][1])
            if not self.accept_new:
                raise HostKeyUnknown(f"Server {name!r} not found in known_hosts")
            line = f"{name} {kind} {key.get_base64()}\n"
            old = self.path.read_text() if self.path.exists() else ""
            if old and not old.endswith("\n"):
                old += "\n"
            atomic_write(self.path, old + line)  # whole-file replace: never a half-written known_hosts
            self._plain.setdefault(name, []).append((kind, blob))
            self.accepted.append({"host": name, "key_type": kind, "fingerprint": fingerprint(key)})


# ----------------------------------------------------------------------------- our keys


def agent_key_blobs() -> list[bytes]:
    """Public key blobs the running ssh-agent holds (SSH_AUTH_SOCK); empty without an agent."""
    if not os.environ.get("SSH_AUTH_SOCK"):
        return []
    agent = paramiko.Agent()
    try:
        return [k.asbytes() for k in agent.get_keys()]
    except (paramiko.SSHException, OSError):
        return []
    finally:
        agent.close()


def _public_blob(path: Path) -> bytes | None:
    """The key's public half from `<key>.pub`, readable without the passphrase."""
    pub = Path(f"{path}.pub")
    try:
        fields = pub.read_text().split()
        return base64.b64decode(fields[1]) if len(fields) >= 2 else None
    except (OSError, ValueError):
        return None


def load_key(ssh: SshConfig, agent_blobs: list[bytes], ask: bool) -> paramiko.PKey | None:
    """The key file's key, or None when the agent already offers it (or there is no key file).

    An encrypted key is decrypted with a passphrase asked on the terminal; without a terminal
    it is a clear error (load it into ssh-agent), never a traceback.
    """
    path = ssh.key_path()
    if path is None:
        if agent_blobs:
            return None
        raise InputError(
            "ssh.key_file: not set and no ssh-agent with keys (SSH_AUTH_SOCK); gpuforge uses key authentication only",
            "set ssh.key_file in the inventory to the private key that the nodes accept, or ssh-add it to an agent",
        )
    if not path.is_file():
        raise InputError(f"ssh.key_file: {path} does not exist", "point ssh.key_file at an existing private key")
    if agent_blobs and _public_blob(path) in agent_blobs:
        return None  # the agent holds this very key: no passphrase needed
    try:
        return paramiko.PKey.from_path(str(path))
    except (paramiko.PasswordRequiredException, TypeError):
        # cryptography raises TypeError ("Key is password-protected, but password was not provided")
        pass
    except (paramiko.SSHException, ValueError, OSError) as exc:
        raise InputError(f"ssh.key_file: {path} is not a usable private key: {exc}", "pass an OpenSSH private key") from None
    if not ask:
        raise InputError(
            f"ssh.key_file: {path} is encrypted with a passphrase and there is no terminal to ask for it",
            f"load it into ssh-agent first (eval $(ssh-agent); ssh-add {path}), then run again",
        )
    try:
        secret = getpass.getpass(f"Passphrase for {path}: ").encode()
        # bytes at run time (cryptography's load_ssh_private_key); the stubs say str
        return paramiko.PKey.from_path(str(path), secret)  # type: ignore[arg-type]
    except (paramiko.SSHException, ValueError, TypeError):
        raise InputError(f"ssh.key_file: wrong passphrase for {path}", "try again, or ssh-add it to an agent") from None
