"""Credentials (issue 10, class 4): one module finds the shapes people leak, and no line kdkit prints
for a person carries one. Every secret below is made up for the test, in its issuer's format."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import pytest

from kdkit.core.commands import call
from kdkit.core.credentials import find, redact, redacting_excepthook
from kdkit.core.errors import BadInput
from kdkit.core.secretnames import secret_file
from tests.conftest import invoke, tree_snapshot
from tests.transfer.test_bundle import write_fresh_lock

AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"  # the example of AWS's own documentation
# (what it is, the secret, a text that holds it)
SHAPES: list[tuple[str, str, str]] = [
    ("an AWS access key ID", "AKIAIOSFODNN7EXAMPLE", "aws_access_key_id = {}"),
    ("an AWS access key ID", "ASIAY34FZKBOKMUTVV7A", '"{}"'),
    ("an AWS secret access key", AWS_SECRET, "aws_secret_access_key={}"),
    ("an AWS secret access key", AWS_SECRET, "AWS_SECRET_ACCESS_KEY: '{}'"),
    ("an AWS secret access key (40 random characters)", AWS_SECRET, "the key is {} and more"),
    ("a GitHub token", "ghp_" + "A1b2C3d4E5" * 3 + "f6G7h8", "git clone https://{}@github.com/o/r"),
    ("a GitHub token", "gho_" + "Zz9Yy8Xx7W" * 3 + "w6Vv5U", "{}"),
    ("a GitHub token", "ghs_" + "0aB1cD2eF3" * 3 + "g4H5i6", "token {}"),
    ("a GitHub token", "github_pat_11ABCDEFG0" + "abcdefghij" * 6 + "K1", "{}"),
    ("a GitLab token", "glpat-xY3zA9bC7dE5fG1hJ2kL", "private-token {}"),
    ("a Hugging Face token", "hf_" + "aBcDeFgHiJ" * 3 + "kLmN", "HF={}"),
    ("an OpenAI API key", "sk-proj-" + "Ab3dEf6hIj" * 5, "{}"),
    ("an OpenAI API key", "sk-" + "T3BlbkFJ" * 4, "key {}"),
    ("an Anthropic API key", "sk-ant-api03-" + "Xy7_Zw-9Ab" * 9 + "cdAA", "{}"),
    ("a Slack token", "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx", "{}"),
    ("a Slack token", "xoxp-1234-5678-90ab-cdef0123456789", "{}"),
    ("a Google API key", "AIzaSyDaGmWKa4JsXZ-HjGw7ISLn_3namBGewQe", "maps?key={}"),
    ("a Stripe secret key", "sk_live_4eC39HqLyjWDarjtT1zdp7dc", "{}"),
    ("a Stripe secret key", "rk_live_51H8abcDEFghiJKLmnoPQRstu", "{}"),
    ("an npm token", "npm_" + "a1B2c3D4e5" * 3 + "F6g7h8", "//registry.npmjs.org/:_authToken={}"),
    ("a PyPI token",
     "pypi-AgEIcHlwaS5vcmc" + "CJDAwMDAwMDAwLTAwMDAtMDAwMC0wMDAwLTAwMDAwMDAwMDAwMAAC", "{}"),
    ("a JSON web token", "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N",
     "Bearer {}"),
    ("a private key block", "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\n"
     "-----END OPENSSH PRIVATE KEY-----", "{}"),
    ("a private key block", "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA", "key: {}"),
    ("a private key block", "-----BEGIN PGP PRIVATE KEY BLOCK-----\nlQOYBF", "{}"),
    ("a password inside a URL", "s3cr3t-Pa55",
     "--extra-index-url https://ana:{}@pypi.corp.example/simple"),
    ("a password inside a URL", "hunter2", "postgres://app:{}@db:5432/x"),
    ("a secret assigned to password", "hunter2", "--password={} --user ana"),
    ("a secret assigned to passwd", "correct-horse", "passwd = {}"),
    ("a secret assigned to token", "abc123", "https://host/simple?token={}&x=1"),
    ("a secret assigned to api_key", "0123-secret", 'api_key="{}"'),
    ("a secret assigned to DB_PASSWORD", "Tr0ub4dor", "DB_PASSWORD={}"),
    ("a secret assigned to client_secret", "cl1ent", "client_secret: '{}'"),
]


@pytest.mark.parametrize(("what", "secret", "text"), SHAPES,
                         ids=[f"{i}-{s[0]}" for i, s in enumerate(SHAPES)])
def test_each_shape_is_found_and_redacted(what: str, secret: str, text: str) -> None:
    line = text.format(secret)
    found = find(line)
    assert [f.what for f in found] == [what]
    shown = redact(line)
    assert secret not in shown and "<redacted" in shown
    assert redact(shown) == shown  # redaction is stable: a redacted form holds no shape


def test_redacted_forms_keep_what_and_where() -> None:
    assert redact(
        "https://ana:s3cret@mirror.example/whl") == "https://ana:<redacted>@mirror.example/whl"
    assert redact("password=hunter2;") == "password=<redacted>;"
    token = "ghp_" + "A1b2" * 9
    assert redact(
        f"GITHUB_TOKEN={token}") == "GITHUB_TOKEN=<redacted: a GitHub token, 40 characters>"
    assert redact(f"$.name: \"{'AKIAIOSFODNN7EXAMPLE'}\" does not match") == (
        '$.name: "<redacted: an AWS access key ID, 20 characters>" does not match')


PLACEHOLDERS = [
    "--extra-index-url https://ana:${PIP_PASSWORD}@pypi.corp.example/simple",
    "https://user:$PASS@host/simple", "https://user:<password>@host/", "https://user:****@host/",
    "password=", "password=${DB_PASSWORD}", "password=$DB_PASSWORD", "api_key=<your key>",
    "token={{ secrets.TOKEN }}", "secret=%SECRET%", 'password: ""', "token=xxxxxx", "password=null",
]
NOT_SECRETS = [
    "revision 0123456789abcdef0123456789abcdef01234567 (40 hex digits)",
    "--hash=sha256:" + "ab" * 32, "/Users/AnaSmith/Projects/MyProj2/config1",
    "https://download.pytorch.org/whl/cu128", "git+ssh://git@github.com:org/repo.git",
    "https://host:8080/path", "max_tokens=512",
    "kdkit.json: $.hf_token: key 'hf_token' looks like a secret",
    "sk-learn-is-not-a-key-at-all-really",
    "torch==2.8.0+cu128", "ThisIsMyVeryLongCamelCaseIdentifierName",
]


@pytest.mark.parametrize("text", PLACEHOLDERS + NOT_SECRETS)
def test_placeholders_and_ordinary_text_are_left_alone(text: str) -> None:
    assert find(text) == []
    assert redact(text) == text


SECRET_FILES = [".env", ".env.production", "secrets.env", "prod.env", ".ssh/id_ed25519",
                ".ssh/config",
                "id_rsa", "keys/id_ecdsa", ".netrc", ".pypirc", ".npmrc", ".git-credentials",
                "credentials.json", "secrets.yaml", "server.pem", "config/api.key", "cert.p12",
                ".aws/credentials",
                "src/.env", "data/pilot/.ENV.local", "deploy/service-account-prod.json"]
ORDINARY_FILES = [".env.example", ".env.sample", "id_rsa.pub", "src/classify.py",
                  "config/pilot.json",
                  "requirements/base.in", "README.md", "data/pilot/doc-01.txt", "keyboard.py"]


@pytest.mark.parametrize("rel", SECRET_FILES)
def test_secret_shaped_file_names(rel: str) -> None:
    assert secret_file(rel) is not None


@pytest.mark.parametrize("rel", ORDINARY_FILES)
def test_ordinary_file_names(rel: str) -> None:
    assert secret_file(rel) is None


# ---------------------------------------------------------------- kdkit validate


def _set(path: Path, keys: list[str], value: object) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    target = data
    for key in keys[:-1]:
        target = target[key]
    target[keys[-1]] = value
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")


def _validate(project: Path, *args: str) -> tuple[int, str, str]:
    before = tree_snapshot(project)
    result = invoke("validate", project, *args)
    assert tree_snapshot(project) == before, "validate must not write anything"
    return result.exit_code, result.stdout, result.stderr


# (what the user did, file to write, its text, the secret, the expected line of the report)
TEXT_CASES = [
    ("password in an index URL", "requirements/base.in",
     "--extra-index-url https://ana:Sup3rSecret@pypi.corp.example/simple\ntorch==2.8.0\n",
     "Sup3rSecret",
     "requirements/base.in: line 1: holds a password inside a URL ('--extra-index-url "
     "https://ana:<redacted>@pypi.corp.example/simple'); name an environment variable instead"),
    ("token in a second .in", "requirements/extra.in", "# token for the mirror\ntoken=tok-998877\n",
     "tok-998877",
     "requirements/extra.in: line 2: holds a secret assigned to token ('token=<redacted>')"),
    ("GitHub token in a VCS requirement", "requirements/base.in",
     "torch==2.8.0\nmylib @ git+https://ghp_" + "Q1w2E3r4T5" * 3 + "y6U7i8@github.com/o/mylib\n",
     "ghp_" + "Q1w2E3r4T5" * 3 + "y6U7i8", "requirements/base.in: line 2: holds a GitHub token"),
    ("AWS secret in the lock", "requirements/cpu.txt", None, AWS_SECRET,
     "requirements/cpu.txt: line 7: holds an AWS secret access key"),
]


@pytest.mark.parametrize(("edit", "rel", "text", "secret", "expected"), TEXT_CASES,
                         ids=[c[0] for c in TEXT_CASES])
def test_validate_finds_credentials_in_requirements_and_locks(project: Path, edit: str, rel: str,
                                                              text: str | None,
                                                              secret: str, expected: str) -> None:
    if text is None:
        lock = write_fresh_lock(project)
        lock.write_text(lock.read_text(encoding="utf-8")
                        + f"# aws_secret_access_key={secret}\n", encoding="utf-8")
    else:
        (project / rel).write_text(text, encoding="utf-8")
    code, stdout, stderr = _validate(project)
    assert code == 2
    assert f"{project}/{expected}" in stderr
    assert secret not in stdout + stderr
    code, stdout, stderr = _validate(project, "--json")
    assert code == 2 and secret not in stdout + stderr


JSON_CASES = [
    ("AWS key ID as the project name", "kdkit.json", ["name"], "AKIAIOSFODNN7EXAMPLE",
     'kdkit.json: $.name: "<redacted: an AWS access key ID, 20 characters>" does not match'),
    ("AWS secret as the target GPU", "kdkit.json", ["target_gpu"], AWS_SECRET,
     "kdkit.json: $.target_gpu: value looks like an AWS secret access key (40 random characters)"),
    ("password= inside a value", "kdkit.json", ["target_gpu"], "RTX 4090 --password=hunter22",
     "kdkit.json: $.target_gpu: value looks like a secret assigned to password; remove it and put "
     "it in .env"),
    ("token as an unknown key's name", "config/pilot.json", ["ghp_" + "Zx9Cv8Bn7M" * 3 + "l1K2j3"],
     1,
     "config/pilot.json: $: unknown key '<redacted: a GitHub token, 40 characters>'"),
    ("token as a wrong type", "config/pilot.json", ["batch_size"],
     "hf_" + "Qw3Er4Ty5U" * 3 + "i6O7",
     'config/pilot.json: $.batch_size: expected integer, got str "<redacted: a Hugging Face token'),
    ("token in an enum", "kdkit.json", ["default_backend"], "sk_live_4eC39HqLyjWDarjtT1zdp7dc",
     'kdkit.json: $.default_backend: "<redacted: a Stripe secret key, 32 characters>" is not '
     'allowed'),
    ("token against a pattern", "config/pilot.json", ["device"],
     "npm_" + "a1B2c3D4e5" * 3 + "F6g7h8",
     "config/pilot.json: $.device: '<redacted: an npm token, 40 characters>'; use auto, cpu, cuda "
     "or cuda:N"),
    ("URL password as a path", "config/pilot.json", ["inputs"], "https://u:pw123456@host/data",
     "config/pilot.json: $.inputs: value looks like a password inside a URL"),
]


@pytest.mark.parametrize(("rel", "keys", "value", "expected"), [c[1:] for c in JSON_CASES],
                         ids=[c[0] for c in JSON_CASES])
def test_no_validate_message_echoes_a_secret(project: Path, rel: str, keys: list[str],
                                             value: object,
                                            expected: str) -> None:
    _set(project / rel, keys, value)
    secrets = [str(value), *keys] if isinstance(value, str) else keys[-1:]
    for args in ((), ("--json",)):
        code, stdout, stderr = _validate(project, *args)
        assert code == 2
        for secret in secrets:
            if find(secret):
                assert secret not in stdout + stderr
    assert f"{project}/{expected}" in _validate(project)[2]


def test_secret_shaped_files_are_warnings_not_problems(project: Path) -> None:
    for rel in (".env", ".env.production", ".ssh/id_ed25519", "config/.netrc", "src/secrets.env"):
        (project / rel).parent.mkdir(parents=True, exist_ok=True)
        (project / rel).write_text("API_TOKEN=made-up-but-private\n", encoding="utf-8")
    code, stdout, stderr = _validate(project)
    assert code == 0
    # and the one about git (tests/conftest.valid_outside_git)
    assert stdout == f"{project}: valid (6 warning(s))\n"
    assert (f"Warning: {project}/.ssh/id_ed25519: name: named like an SSH private key, so `kdkit "
            "bundle` leaves it out") in stderr
    assert "made-up-but-private" not in stdout + stderr
    code, stdout, _stderr = _validate(project, "--json")
    report = json.loads(stdout)
    assert code == 0 and report["valid"] is True and report["problems"] == []
    assert [w["where"] for w in report["warnings"]] == [".env", ".env.production",
                                                        ".ssh/id_ed25519",
                                                      "config/.netrc", "src/secrets.env", "."]
    assert {w["name"] for w in report["warnings"]} == {"name", "git"}


def test_a_fresh_project_has_no_warnings(project: Path) -> None:
    report = json.loads(invoke("validate", project, "--json").stdout)
    # outside git (a tmp)
    assert [w["name"] for w in report["warnings"]] == ["git"] and report["valid"] is True


# ---------------------------------------------------------------- every error line printed for a person


def test_click_group_redacts_the_error_line() -> None:
    token = "ghp_" + "M9n8B7v6C5" * 3 + "x4Z3a2"
    result = invoke("estimate-memory", "--params", token)
    assert result.exit_code == 2
    assert token not in result.stderr and result.stderr.count("\n") == 1
    assert "<redacted: a GitHub token, 40 characters>" in result.stderr


def test_click_group_redacts_the_debug_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KDKIT_DEBUG", "1")
    result = invoke("estimate-memory", "--params", "https://ana:hunter22@host/x")
    assert result.exit_code == 2
    assert "Traceback" in result.stderr and "hunter22" not in result.stderr


def test_probe_commands_redact_the_error_line(tmp_path: Path) -> None:
    lock = tmp_path / "requirements" / "cpu.txt"
    lock.parent.mkdir()
    lock.write_text(f"tinypkg==1.0 \\\n    --hash=sha256:{'ab' * 32}\n", encoding="utf-8")
    secret = "password=Sw0rdfish42"
    result = invoke("verify-env", "--lock", lock, "--python", tmp_path / secret)
    assert result.exit_code == 2
    assert "Sw0rdfish42" not in result.stderr and "password=<redacted>" in result.stderr


def test_probe_call_redacts_any_kdkit_error(capsys: pytest.CaptureFixture[str]) -> None:
    def main(_argv: list[str]) -> int:
        raise BadInput(f"config.json: $.x: {AWS_SECRET} is not allowed")

    assert call(main, []) == 2
    err = capsys.readouterr().err
    assert AWS_SECRET not in err and err == (
        "Error: config.json: $.x: <redacted: an AWS secret access key, 40 characters> is not "
        "allowed\n")


def test_a_crash_traceback_is_redacted(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    try:
        raise ValueError("unexpected value 'xoxb-123456789012-abcdefABCDEF123456'")
    except ValueError as exc:
        redacting_excepthook(type(exc), exc, exc.__traceback__)
    assert "ValueError" in stream.getvalue() and "xoxb-123456789012" not in stream.getvalue()


WORST_CASES = {"dotted words": "a." * 10000, "one long word": "a" * 20000, "colons": "a:" * 10000,
               "open placeholders": "password=" + "${" * 10000, "schemes": "a://b:" * 4000,
               "assignments": "password=" * 2500, "dashed words": "a-" * 10000,
               "token prefixes": "eyJ" * 7000}


@pytest.mark.parametrize("text", WORST_CASES.values(), ids=WORST_CASES.keys())
def test_scanning_a_hostile_value_stays_linear(text: str) -> None:
    import time

    started = time.perf_counter()
    redact(text)
    # 20 000 characters; a quadratic pattern took 13 s here and linear ones take milliseconds: the bound is 5 s so
    # that a loaded machine never fails a linear one
    assert time.perf_counter() - started < 5


@pytest.mark.parametrize("url", ["https://ZkQ9wX2mRt7LpV4nB8cY@127.0.0.1:8080/simple/",
                                 "https://ZkQ9wX2mRt7LpV4nB8cY:@pypi.fury.io/someone/",
                                 "--extra-index-url http://deploy-token@mirror.example/simple"])
def test_a_token_given_as_a_urls_user_name_is_a_secret(url: str) -> None:
    """Gemfury documents https://TOKEN:@pypi.fury.io/USER/ for pip; a lock or a message must not carry it."""
    assert [f.what for f in find(url)] == ["a user name or token inside a URL"]
    assert "ZkQ9" not in redact(url) and "deploy-token" not in redact(url)
    assert find("https://${PIP_TOKEN}@pypi.fury.io/someone/") == [] and find(
        "git+ssh://git@github.com/o/r") == []
