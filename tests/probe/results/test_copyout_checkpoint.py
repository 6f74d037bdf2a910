"""`kdkit copy-out` of a checkpoint folder: a plain one (a Hugging Face Trainer's, no SHA256SUMS) is hashed at the
source and verified where it lands; one with its own SHA256SUMS (kdkit train's) is checked against it first and
travels with it; one missing a file it lists, or changed since, is refused with nothing left at DEST."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from pathlib import Path

from tests.conftest import invoke, tree_snapshot

HF_FILES = ("model.pt", "optimizer.pt", "scheduler.pt",
            "scaler.pt", "rng_state.pth", "trainer_state.json")


def _checkpoint(folder: Path, sums: bool) -> Path:
    folder.mkdir(parents=True)
    for name in HF_FILES:
        (folder / name).write_bytes(json.dumps({"global_step": 3}).encode()
                                    if name.endswith(".json")
                                    else os.urandom(2048))
    if sums:  # as kdkit.core.checkpoints writes it: sha256sum's format, sorted
        lines = [f"{hashlib.sha256((folder / name).read_bytes()).hexdigest()}  {name}\n"
                 for name in sorted(HF_FILES)]
        (folder / "SHA256SUMS").write_text("".join(lines), encoding="utf-8")
    return folder


def test_a_plain_checkpoint_folder_is_hashed_at_the_source_and_says_so(tmp_path: Path) -> None:
    ckpt = _checkpoint(tmp_path / "checkpoint-500", sums=False)
    before = tree_snapshot(ckpt)
    result = invoke("copy-out", ckpt, tmp_path / "dest", "--json")
    assert result.exit_code == 0, result.stderr
    assert json.loads(result.stdout)["sums"] == "computed" and json.loads(
        result.stdout)["files"] == len(HF_FILES)
    copy = tmp_path / "dest" / "checkpoint-500"
    assert subprocess.run(["sha256sum", "-c", "--quiet", "SHA256SUMS"], cwd=copy).returncode == 0
    assert tree_snapshot(ckpt) == before  # nothing written into the source
    text = invoke("copy-out", ckpt, tmp_path / "dest2")
    assert "computed at the source: the folder had no SHA256SUMS" in text.stdout, text.stdout
    assert invoke("copy-out", "--verify", copy).exit_code == 0


def test_a_checkpoint_folder_with_its_own_sums_travels_with_them(tmp_path: Path) -> None:
    ckpt = _checkpoint(tmp_path / "run" / "checkpoints" / "step-00000003", sums=True)
    result = invoke("copy-out", ckpt, tmp_path / "dest")
    assert result.exit_code == 0, result.stderr
    assert "the checkpoint folder's own, checked at the source first" in result.stdout
    copy = tmp_path / "dest" / "step-00000003"
    assert (copy / "SHA256SUMS").read_bytes() == (ckpt / "SHA256SUMS").read_bytes()
    assert sorted(path.name for path in copy.iterdir()) == sorted([*HF_FILES, "SHA256SUMS"])
    assert invoke("copy-out", "--verify", copy).exit_code == 0
    (copy / "optimizer.pt").write_bytes(b"changed")
    failed = invoke("copy-out", "--verify", copy)
    assert failed.exit_code == 1 and "optimizer.pt: SHA-256" in failed.stderr, failed.stderr


def test_a_checkpoint_folder_missing_a_file_it_lists_is_refused(tmp_path: Path) -> None:
    ckpt = _checkpoint(tmp_path / "step-00000003", sums=True)
    (ckpt / "scheduler.pt").unlink()
    result = invoke("copy-out", ckpt, tmp_path / "dest")
    assert result.exit_code == 1
    assert result.stderr.splitlines()[-1] == (f"Error: {ckpt / 'scheduler.pt'}: missing, listed in "
                                              "SHA256SUMS; the checkpoint folder is incomplete or "
                                              "changed since it was written: copy a complete one")
    assert not (tmp_path / "dest").exists() or list((tmp_path / "dest").iterdir()) == []


def test_a_checkpoint_folder_changed_after_it_was_written_is_refused(tmp_path: Path) -> None:
    ckpt = _checkpoint(tmp_path / "step-00000003", sums=True)
    (ckpt / "model.pt").write_bytes(b"torn")
    (ckpt / "extra.bin").write_bytes(b"x")
    result = invoke("copy-out", ckpt, tmp_path / "dest")
    assert result.exit_code == 1 and f"{ckpt / 'model.pt'}: SHA-256 differs" in result.stderr, result.stderr
    assert not (tmp_path / "dest" / "step-00000003").exists()
