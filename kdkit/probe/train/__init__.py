"""`kdkit train`: a training loop run as a run (`command.py` the options and the order of it;
`runfiles.py` the run folder: params.json, metrics.jsonl, checkpoints.jsonl, stop.json, the summary
and SHA256SUMS, reopened on `--resume`; `supervise.py` the loop in a process group of its own, its
channel (kdkit.core.trainapi) read, the stop rules judged, its output relayed escaped and kept in
output.log; `saving.py` the measured save cost, the interval that meets max_lost_minutes, a
checkpoint's transfer time to
--copy-to; `reload.py` reload.json and `--verify-reload`)."""
