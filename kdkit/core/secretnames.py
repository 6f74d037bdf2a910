"""The names of files and folders that hold secrets (``.env*``, ``*.pem``, ``id_ed25519``,
``.netrc``, ``.ssh/`` ...), which no bundle and no image carries: :data:`SECRET_FILES`, the one
copy of that fact, and :func:`secret_file`, which judges a path by it. The shapes of secrets
inside a text are :mod:`kdkit.core.credentials`'.
"""

from __future__ import annotations

import fnmatch
from pathlib import PurePosixPath

# Files and folders that hold secrets, matched against every component of a path (case ignored).
SECRET_FILES: tuple[tuple[str, str], ...] = (
    (".env", "an environment file"), (".env?*", "an environment file"),
    ("*.env", "an environment file"), (".envrc", "an environment file"),
    ("*.pem", "a PEM key or certificate"), ("*.key", "a private key"),
    ("*.p12", "a PKCS#12 key store"), ("*.pfx", "a PKCS#12 key store"),
    ("*.jks", "a Java key store"), ("*.keystore", "a key store"), ("*.ppk", "a PuTTY private key"),
    ("*.kdbx", "a KeePass database"), ("id_rsa", "an SSH private key"),
    ("id_dsa", "an SSH private key"), ("id_ecdsa", "an SSH private key"),
    ("id_ed25519", "an SSH private key"), ("id_ecdsa_sk", "an SSH private key"),
    ("id_ed25519_sk", "an SSH private key"), ("id_rsa.*", "an SSH private key"),
    ("id_dsa.*", "an SSH private key"), ("id_ecdsa.*", "an SSH private key"),
    ("id_ed25519.*", "an SSH private key"), ("*.key.*", "a private key"),
    ("*.p8", "a PKCS#8 private key"), ("*.gpg", "a GnuPG file"), ("token", "a token file"),
    ("*_token", "a token file"), ("*.token", "a token file"), (".netrc", "a netrc password file"),
    ("_netrc", "a netrc password file"), (".pypirc", "a PyPI credentials file"),
    (".npmrc", "an npm credentials file"), (".git-credentials", "a git credentials file"),
    (".pgpass", "a PostgreSQL password file"), (".htpasswd", "a password file"),
    (".dockercfg", "a Docker credentials file"), (".vault-token", "a Vault token"),
    (".s3cfg", "S3 credentials"), (".boto", "cloud credentials"),
    ("credentials*", "a credentials file"), ("secrets*", "a secrets file"),
    ("*.secret", "a secrets file"), ("*.secrets", "a secrets file"), (".ssh", "an SSH folder"),
    (".aws", "an AWS credentials folder"), (".gnupg", "a GnuPG keyring"),
    (".docker", "a Docker credentials folder"), (".kube", "a Kubernetes credentials folder"),
    (".azure", "an Azure credentials folder"), (".password-store", "a password store"),
    ("application_default_credentials.json", "Google Cloud credentials"),
    ("service-account*.json", "a cloud service-account key"),
    ("*-credentials.json", "a credentials file"),
)
# Templates that name the variables without their values, and public keys: meant to be shared.
NOT_SECRET_FILES = (".env.example", ".env.sample", ".env.template", ".env.dist")
NOT_SECRET_SUFFIXES = (".pub",)


def secret_file(rel: str | PurePosixPath) -> str | None:
    """What the file at ``rel`` (relative to the project) looks like when its name or a folder above
    it is secret-shaped, else None."""
    for part in reversed(PurePosixPath(rel).parts):  # the file's own name first, then its folders
        name = part.lower()
        if name in NOT_SECRET_FILES or name.endswith(NOT_SECRET_SUFFIXES):
            continue
        for pattern, what in SECRET_FILES:
            if fnmatch.fnmatchcase(name, pattern):
                return what
    return None
