#!/usr/bin/env bash
# Evidence from a GPU machine, with the machine's own torch (issue 27, "GPU"): kdkit torch-arch, diagnose
# --deep, diagnose --accept --seconds 120 and the STREAM bandwidth of every visible card, each written under
# docs/evidence/gpu-<UTC date>-<host>/ with its exit code, then a summary.md of the figures against the
# measured references (kdkit/data/acceptance.json "reference").
#
# Usage: scripts/gpu_evidence.sh [OUT_DIR]   (PYTHON=/path/to/python with torch; ACCEPT_SECONDS=120)
# Needs only the standard library and torch: kdkit's in-container side is run from this checkout
# (PYTHONPATH), no venv, no install. A step that fails is recorded and the next one still runs; the script
# exits 0 once the evidence is written (the verdicts are in the files), 3 without a torch to run.
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
py=${PYTHON:-python3}
seconds=${ACCEPT_SECONDS:-120}
stamp=$(date -u +%Y%m%dT%H%M%SZ)
out=${1:-"$repo/docs/evidence/gpu-$stamp-$(hostname -s 2>/dev/null || echo host)"}
mkdir -p "$out"
export PYTHONPATH="$repo${PYTHONPATH:+:$PYTHONPATH}"
step() { printf '\n== %s\n' "$*"; }
run() {  # run NAME CMD...: stdout to NAME, stderr to NAME.err, exit code to exit-codes.txt
    local name=$1; shift
    local started=$SECONDS
    "$@" >"$out/$name" 2>"$out/$name.err"
    local rc=$?
    printf '%s\t%s\t%ss\n' "$name" "$rc" "$((SECONDS - started))" >>"$out/exit-codes.txt"
    [ -s "$out/$name.err" ] || rm -f "$out/$name.err"
    return 0
}

if ! "$py" -c 'import torch' 2>/dev/null; then
    echo "no torch in $py: set PYTHON to the machine's interpreter that has it" >&2
    exit 3
fi
: >"$out/exit-codes.txt"

step "the machine"
{
    date -u +%Y-%m-%dT%H:%M:%SZ
    uname -a
    git -C "$repo" rev-parse HEAD 2>/dev/null
    "$py" -c 'import sys, torch; print(sys.version.split()[0], torch.__version__, torch.version.cuda,
getattr(torch.version, "hip", None), torch.cuda.device_count())'
    command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=index,name,driver_version,memory.total,power.limit \
        --format=csv
    command -v amd-smi >/dev/null && amd-smi static --asic --json 2>/dev/null | head -c 4000
} >"$out/machine.txt" 2>&1
cat "$out/machine.txt"

step "kdkit torch-arch"
run torch-arch.json "$py" -m kdkit.probe torch-arch --json

step "kdkit diagnose --deep"
run diagnose-deep.json "$py" -m kdkit.probe diagnose --deep --json

step "kdkit diagnose --accept --seconds $seconds"
run accept-stdout.txt "$py" -m kdkit.probe diagnose --accept --seconds "$seconds" --out "$out/accept"

step "STREAM bandwidth of every card (kdkit.probe.diagnose.loadref)"
run bandwidth.json "$py" - <<'EOF'
import json
import torch
from kdkit.probe.diagnose import loadref
from kdkit.probe.diagnose.points import thresholds

rules = thresholds()
cards = []
for index in range(torch.cuda.device_count()):
    device, name = f"cuda:{index}", torch.cuda.get_device_name(index)
    reading = loadref.bandwidth(torch, device)
    point = loadref.bandwidth_point(index, device, name, reading, rules["reference"], rules["load"])
    cards.append({"device": device, "name": name, "card": loadref.card_of(name, rules["reference"])[0],
                  "reading": reading, "verdict": point.verdict, "why": point.why})
    torch.cuda.empty_cache()
print(json.dumps({"torch": torch.__version__, "cards": cards}, indent=2))
EOF

step "summary"
"$py" - "$out" >"$out/summary.md" <<'EOF'
import json
import sys
from pathlib import Path

out = Path(sys.argv[1])
lines = [f"# GPU evidence ({out.name})", "", "| step | exit | seconds |", "| --- | --- | --- |"]
lines += ["| " + " | ".join(row.split("\t")) + " |" for row in (out / "exit-codes.txt").read_text().splitlines()]
accept = out / "accept" / "acceptance.json"
if accept.is_file():
    report = json.loads(accept.read_text(encoding="utf-8"))
    lines += ["", f"Acceptance verdict: **{report.get('verdict')}**", "", "| point | GPU | reading | verdict | why |",
              "| --- | --- | --- | --- | --- |"]
    for point in report.get("points", []):
        if point.get("name") in ("load.gemm.tflops", "load.gemm.reference", "load.gemm.sustained",
                                 "load.memory.bandwidth", "load.gemm.bitwise", "load.memory.fill"):
            why = str(point.get("why", "")).replace("|", "\\|")
            lines.append(f"| {point['name']} | {point.get('gpu')} | {json.dumps(point.get('reading'))} | "
                         f"{point.get('verdict')} | {why} |")
bandwidth = out / "bandwidth.json"
if bandwidth.is_file() and bandwidth.stat().st_size:
    lines += ["", "| device | name | card | copy GB/s | triad GB/s | verdict |", "| --- | --- | --- | --- | --- | --- |"]
    for card in json.loads(bandwidth.read_text(encoding="utf-8")).get("cards", []):
        lines.append(f"| {card['device']} | {card['name']} | {card['card']} | {card['reading']['copy']} | "
                     f"{card['reading']['triad']} | {card['verdict']} |")
print("\n".join(lines))
EOF
cat "$out/summary.md"
echo "evidence: $out"
