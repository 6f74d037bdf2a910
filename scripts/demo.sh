#!/usr/bin/env bash
# kdkit's main job on the embedded example project, locally on CPU: no GPU, no registry, no Docker;
# then the two other templates (embed: vectors; generate: text with params) through their own pilots.
# `make demo` runs it with .venv/bin first on PATH. Everything lands in one temporary folder.
set -euo pipefail

work=$(mktemp -d "${TMPDIR:-/tmp}/kdkit-demo.XXXXXX")
proj="$work/doc-classifier"
step() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

step "kdkit init: a project that survives a change of machine"
kdkit init "$proj" --backend cpu

step "kdkit validate: schemas + portability rules"
kdkit validate "$proj"

step "kdkit diagnose --expect cpu: from the interpreter to real kernels"
kdkit diagnose --expect cpu --project "$proj" --out "$work/diagnose.json"

step "kdkit pilot: 12 documents, exactly-once accounting (11 accepted, 1 rejected)"
kdkit pilot "$proj" --copy-to "$work/evidence"

step "kdkit init --template embed: a text embedder (32 floats per text, cosine against reference vectors)"
kdkit init "$work/text-embedder" --backend cpu --template embed
kdkit validate "$work/text-embedder"

step "kdkit pilot on the embed template: 10 texts, vectors kept whole (9 accepted, 1 rejected)"
kdkit pilot "$work/text-embedder"

step "kdkit init --template generate: a text generator (params max_new_tokens, temperature, seed)"
kdkit init "$work/text-generator" --backend cpu --template generate
kdkit validate "$work/text-generator"

step "kdkit pilot on the generate template: 8 prompts, greedy outputs matched exactly (7 accepted, 1 rejected)"
kdkit pilot "$work/text-generator"

step "kdkit plan: what 2 RTX 4090 lots for 3 days cost, and whether 48 h of work fit"
kdkit plan --gpu "RTX 4090" --days 3 --lots 2 --hours 48 --accepted 1 --save "$work/order.json"

step "kdkit estimate-memory: a lower bound, never a promise"
kdkit estimate-memory --params 7e9 --dtype bf16 --train adam --gpu "RTX 4090" || true

step "kdkit resume-test: training resumes in a new process"
kdkit resume-test "$proj"

step "kdkit train: the fine-tune as a run (metrics, checkpoints, stop rules), killed mid-run, then resumed"
(cd "$proj" && exec kdkit train --run-id train-demo --variant fine-tuned -- --steps 200 --save-every 20) &
trainer=$!
saves="$proj/runs/train-demo/checkpoints.jsonl"
for _ in $(seq 600); do
  [ -f "$saves" ] && [ "$(wc -l < "$saves")" -ge 2 ] && break
  sleep 0.1
done
kill -9 "$trainer"; wait "$trainer" || true
echo "killed after $(wc -l < "$saves") checkpoint(s); resuming from the newest complete one"
(cd "$proj" && kdkit train --resume train-demo && kdkit train --verify-reload train-demo)

step "kdkit campaign: the control and the variants against the threshold, what remains, what to cut"
kdkit campaign "$proj" --order "$work/order.json"
kdkit campaign decide "cut high-lr" "$proj" --why "the pilot and the fine-tune answer the question"

step "kdkit plan --schedule: stages on GPUs against the window, what to cut when over"
cat > "$work/schedule.json" <<'JSON'
{"stages": [
  {"name": "setup", "machine_hours": 2, "human_hours": 1, "category": "essential"},
  {"name": "control", "machine_hours": 6, "category": "essential", "after": ["setup"], "gpu": 0},
  {"name": "fine-tuned", "machine_hours": 30, "category": "useful", "after": ["setup"], "gpu": 1},
  {"name": "high-lr", "machine_hours": 30, "category": "exploratory", "after": ["setup"], "gpu": 1}
]}
JSON
kdkit plan --gpu "RTX 4090" --days 3 --lots 2 --schedule "$work/schedule.json"

step "kdkit sweep: batch sizes by measurement"
kdkit sweep "$proj" --batch-sizes 1,2,4

step "kdkit lock --backend cpu: a hashed lock with its provenance"
# The torch wheel is fetched through pip's own configuration into a local folder, which stands
# in for the PyTorch CPU index (what air-gapped users do with --torch-find-links).
python -m pip download -q --no-deps --only-binary=:all: -d "$work/torch-wheels" "torch==2.13.0"
kdkit lock "$proj" --backend cpu --torch-find-links "$work/torch-wheels"

step "kdkit bundle --no-image, then verify-bundle"
kdkit bundle "$proj" --out "$work/bundle" --no-image
kdkit verify-bundle "$work/bundle"

step "kdkit close: the campaign report"
kdkit plan --order "$work/order.json" --order-number "DEMO-0001" --order-status paid
kdkit close "$proj" --order "$work/order.json" --out "$work/report" --expense "storage 4.50 USD"

step "kdkit plan --from-report: the next order from what was measured"
kdkit plan --gpu "RTX 4090" --days 3 --lots 1 --from-report "$work/report/campaign-report.json"

printf '\nDone. Everything is under %s\n' "$work"
