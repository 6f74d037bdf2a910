"""`kdkit pilot`'s command line: its help and options (the run itself is
kdkit.probe.pilot.command)."""

from __future__ import annotations

import argparse
from pathlib import Path

from kdkit.core.parsers import add_json, command_parser
from kdkit.core.runid import run_id_type
from kdkit.probe.pilot.shares import add_share_arguments

HELP = """\
Run the pilot documents (or, with --config, the full corpus) through the
project's app with exactly-once accounting.

The harness reads each input itself (a folder's files, or the records of a
JSONL corpus): one that is missing, unreadable, over max_input_bytes or not
UTF-8 (unless "decode": "bytes") is rejected with that reason and never reaches
the app. The app's entry (config: "entry") is called as predict(items) or
predict(items, params) with items [{"id", "text" | "bytes" | "record",
"sha256"}] (+ "out_dir" for the file output kind) and answers
[{"id": ..., "output": value}] ({"id", "category"} for categories) or
[{"id": ..., "error": "reason"}]. The config's "output" says what a value is:
a category, text (max_chars), a vector (dim; kept in vectors.npy), JSON valid
against a schema, or the files written into out_dir (kept in outputs/). A batch
that raises is retried item by item. The app runs in a process of its own:
when it exits, crashes, is killed (the out-of-memory killer) or takes longer
than stop.max_batch_seconds on a batch, the run stops, closed, with stop.json
naming what happened and the batch in flight. Anything the app writes into its
run folder (outside its out_dir) fails the run.

The run passes when every ID appears exactly once, no ID is invented, each
answer is of the declared kind, each rejection has a reason, the expected
rejections were rejected and the rest accepted, and, where the manifest gives
labels or expected outputs, quality >= min_quality (or quality.min, with the
project's own quality.scorer)."""
EPILOG = """\
run folder runs/<run-id>/ (run-id = UTC time + hash of the parameters):
  params.json, env.json (the diagnose report), results.jsonl (fsynced per batch),
  summary.json, summary.md, SHA256SUMS, stop.json (only when stopped early)
  + vectors.npy and vectors.ids.jsonl (vector output), outputs/<id>/ (file output)

examples:
  kdkit pilot                          the project around the current folder
  kdkit pilot --resume RUN_ID          after a crash, Ctrl-C or a stop rule
  kdkit pilot --copy-to /mnt/backup    and verify a copy of the run folder
  kdkit pilot --run-id R --worker 0 --workers 2
                                       worker 0's share only -> runs/R-w0of2 (then kdkit gather)
  torchrun --standalone --nproc-per-node 4 --no-python kdkit pilot . --run-id R
                                       each rank its share: the launcher's variables (torchrun,
                                       srun, a Kubernetes Indexed Job, SkyPilot, dstack) give it;
                                       a node of G GPUs runs G workers (docs/launchers.md)

exit: 0 pass, 1 fail (problems listed) or stopped, 2 bad input, 130 Ctrl-C, 143 SIGTERM (docker stop)"""  # noqa: E501 (verbatim text, as printed)


def build_parser() -> argparse.ArgumentParser:
    parser = command_parser("pilot", HELP, EPILOG)
    parser.add_argument("project_dir", type=Path, nargs="?", metavar="PROJECT_DIR",
                        help="the project (default: found upward from the current folder)")
    parser.add_argument("--config", type=Path, metavar="FILE",
                        help=(
                            "pilot config, relative to the project (default: pilot_config in "
                            "kdkit.json)"))
    ident = parser.add_mutually_exclusive_group()
    ident.add_argument("--run-id", metavar="ID", type=run_id_type("--run-id", new=True),
                       help="name the new run (default: UTC time + params hash)")
    ident.add_argument("--resume", metavar="ID", type=run_id_type("--resume"),
                       help="finish run ID: skip its finished items, redo the rest")
    # a str: Path would turn ./a:b into a:b (an SSH host)
    parser.add_argument("--copy-to", metavar="DEST",
                        help="copy the run folder to DEST/<run-id> (a folder, user@host:path or an "
                             "rclone remote:path, as kdkit copy-out) and verify the copy there "
                             "against SHA256SUMS")
    add_json(parser, "summary.json")
    parser.add_argument("--quiet", action="store_true", help="no progress lines on stderr")
    add_share_arguments(parser)
    return parser
