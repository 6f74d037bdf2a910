"""campaign.json and `kdkit campaign`: the file scaffolded by init and checked by validate (every bad input one line
naming the file and the JSON path, exit 2, nothing written), each variant's runs (pilot and train run folders)
against the threshold and the control, the conclusion (a negative result is a result), what remains against the
window and what to cut first, the updated duration estimate, and the append-only decisions log."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from kdkit.config.campaign import load_campaign, read_problems
from kdkit.core.checksums import write_sums
from kdkit.core.errors import BadInput
from kdkit.core.jsonio import sha256_file
from kdkit.order.campaign import (
    DECISIONS,
    append_decision,
    conclusion,
    decision_log,
    read_decisions,
    variant_results,
)
from kdkit.order.campaignview import campaign_status, sweep_rate
from tests.conftest import invoke, tree_snapshot

# ---------------------------------------------------------------- run folders as kdkit writes them


def write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2), encoding="utf-8")


def close_folder(folder: Path) -> None:
    write_sums(folder, [(p.name, p) for p in sorted(folder.iterdir()) if p.is_file()])


def train_run(runs: Path, run_id: str, *, variant: str | None, metrics: dict[str, float],
              verdict: str = "pass",
              started: str = "2026-12-04T08:00:00Z", ended: str = "2026-12-04T09:00:00Z",
              config_file: str | None = None, closed: bool = True) -> Path:
    """A train run folder with the files of the plan's interface (H1's `kdkit train`)."""
    folder = runs / run_id
    (folder / "checkpoints" / "step-00000010").mkdir(parents=True)
    write_json(folder / "params.json",
               {"run_id": run_id, "kind": "train", "created": started, "module": "src.train",
                "args": ["--steps", "10"], "variant": variant, "config_file": config_file,
                "code": {}, "base_model": None, "revision": None, "launch": None})
    (folder
     / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "t": s * 1.0, "loss": 1.0 / s,
                                                       "lr": 0.01,
                                                              "samples_per_s": 100.0,
                                                       "peak_memory_bytes": 1})
                                                  + "\n" for s in range(1, 11)), encoding="utf-8")
    write_json(folder / "stop.json",
               {"reason": "exit", "detail": "the loop ended", "step": 10, "at": ended})
    write_json(folder / "summary.json",
               {"run_id": run_id, "kind": "train", "verdict": verdict, "started": started,
                "ended": ended, "timings": {"seconds": 3600.0}, "steps": 10,
                "metrics": {"loss": 0.1, **metrics}, "final_checkpoint": "step-00000010",
                "save": {}, "reload": None})
    if closed:
        close_folder(folder)
    return folder


def pilot_run(runs: Path, run_id: str, *, quality: float | None, verdict: str = "pass",
              config_file: str = "config/pilot.json", items: int = 100,
              app_seconds: float = 1.0) -> Path:
    """A pilot run folder: params.json naming its config, a summary with its quality and timings."""
    folder = runs / run_id
    folder.mkdir(parents=True)
    write_json(folder / "params.json", {"run_id": run_id, "created": "2026-12-04T07:00:00+00:00",
                                        "params": {"config_file": config_file},
                                        "params_hash": "0" * 64})
    (folder / "results.jsonl").write_text("", encoding="utf-8")
    write_json(folder / "summary.json",
               {"run_id": run_id, "kind": "pilot", "verdict": verdict, "total": items,
                "accepted": items, "rejected": 0, "quality": quality, "min_quality": 0.5,
                "timings": {"seconds": 10.0, "app_seconds": app_seconds,
                            "harness_seconds": 0.0, "items": items}})
    close_folder(folder)
    return folder


def edit_campaign(project: Path, change: Any) -> None:
    path = project / "campaign.json"
    data = json.loads(path.read_text(encoding="utf-8"))
    change(data)
    write_json(path, data)


def variants(project: Path, rows: list[tuple[str, str, float]], control: str | None = None) -> None:
    """Replace the campaign's variants by (name, category, machine_hours) rows, each a train command."""
    def change(data: dict[str, Any]) -> None:
        data["variants"] = [{"name": n, "category": c, "machine_hours": h, "config": None,
                             "command": ["kdkit", "train", "--variant", n]} for n, c, h in rows]
        data["control"] = control or rows[0][0]
    edit_campaign(project, change)


def save_order(project: Path, hours: int = 48) -> Path:
    result = invoke("plan", project, "--gpu", "RTX 4090", "--days", "3", "--lots", "1", "--hours",
                    str(hours),
                    "--save", project / "order.json")
    assert result.exit_code == 0, result.output
    return project / "order.json"


# ---------------------------------------------------------------- the scaffold


def test_init_scaffolds_a_campaign_on_its_corpus(project: Path) -> None:
    data, problems = read_problems(project)
    assert problems == []
    campaign = load_campaign(project)
    assert campaign is not None
    # frozen by the user
    assert campaign.manifest == "data/pilot/manifest.json" and campaign.manifest_sha256 is None
    assert [v.category for v in campaign.variants] == ["essential", "useful", "exploratory"]
    assert campaign.control == "control" and data["deliverables"][-1] == "reloadable artifact"


@pytest.mark.parametrize("template", ["embed", "generate"])
def test_every_template_has_a_campaign_on_its_own_corpus_not_yet_frozen(
    tmp_path: Path, template: str) -> None:
    from kdkit.project.init import init_project

    root = init_project(tmp_path / template, backend="cpu", template=template)
    campaign = load_campaign(root)
    assert campaign is not None and campaign.manifest == "data/pilot/manifest.json"
    assert campaign.manifest_sha256 is None and campaign_status(
        root)["corpus"]["sha256"] == sha256_file(
        root / "data/pilot/manifest.json")


def test_a_project_without_a_campaign_has_none(project: Path) -> None:
    (project / "campaign.json").unlink()
    assert load_campaign(project) is None
    result = invoke("campaign", project)
    assert result.exit_code == 2 and "campaign.json: not found" in result.stderr


# ---------------------------------------------------------------- bad input: one line, file and JSON path, exit 2


def _twice(data: dict[str, Any]) -> None:
    data["variants"][2]["name"] = "fine-tuned"


def _category(data: dict[str, Any]) -> None:
    data["variants"][1]["category"] = "optional"


def _threshold_text(data: dict[str, Any]) -> None:
    data["threshold"] = "0.85"


def _missing_config(data: dict[str, Any]) -> None:
    data["variants"][1]["config"] = "config/nope.json"


def _control(data: dict[str, Any]) -> None:
    data["control"] = "baseline"


def _nothing_to_run(data: dict[str, Any]) -> None:
    data["variants"][1]["command"] = None


BAD = [
    (_twice, "$.variants[2].name", "names a variant twice"),
    (_category, "$.variants[1].category", '"optional" is not allowed'),
    (_threshold_text, "$.threshold", "expected number"),
    (_missing_config, "$.variants[1].config", "does not exist"),
    (_control, "$.control", "'baseline' names no variant"),
    (_nothing_to_run, "$.variants[1]", "neither a config nor a command"),
]


@pytest.mark.parametrize(("change", "where", "said"), BAD, ids=[b[0].__name__ for b in BAD])
def test_a_bad_campaign_is_one_line_naming_file_and_path(
    project: Path, change: Any, where: str, said: str) -> None:
    edit_campaign(project, change)
    _data, problems = read_problems(project)
    assert [(p.name, said in p.why) for p in problems] == [(where, True)]
    save_order(project)
    before = tree_snapshot(project)
    for args in (("campaign", project),
                 ("campaign", "decide", "continue", project, "--why", "fine")):
        result = invoke(*args)
        assert result.exit_code == 2
        assert result.stderr.count(
            "\n") == 1 and f"campaign.json: {where}: " in result.stderr, result.stderr
    assert tree_snapshot(project) == before


@pytest.mark.parametrize("number", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_a_threshold_that_is_not_finite_is_named_by_its_path(project: Path, number: str) -> None:
    path = project / "campaign.json"
    path.write_text(path.read_text(encoding="utf-8").replace('"threshold": 0.85',
                                                             f'"threshold": {number}'),
                    encoding="utf-8")
    _data, problems = read_problems(project)
    assert [(p.name, "is not a finite number" in p.why)
            for p in problems] == [("$.threshold", True)]
    before = tree_snapshot(project)
    result = invoke("campaign", project)
    assert result.exit_code == 2 and result.stderr.startswith(f"Error: {path}: $.threshold: ")
    assert tree_snapshot(project) == before


def test_init_leaves_the_corpus_unfrozen_and_campaign_says_how_to_freeze_it(project: Path) -> None:
    """The user replaces the example data first: nothing is refused until the campaign is frozen, and
    `kdkit campaign` names the hash to freeze it with."""
    manifest = project / "data/pilot/manifest.json"
    manifest.write_text(manifest.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    assert read_problems(project)[1] == []
    result = invoke("campaign", project)
    assert result.exit_code == 0, result.output
    assert (f'Corpus not frozen yet: once data/pilot/manifest.json is final, write "sha256": '
            f'"{sha256_file(manifest)}" under "corpus" in campaign.json') in result.stdout


def test_a_changed_corpus_is_named(project: Path) -> None:
    manifest = project / "data/pilot/manifest.json"
    edit_campaign(project, lambda d: d["corpus"].update(sha256=sha256_file(manifest)))
    assert read_problems(project)[1] == []
    manifest.write_text(manifest.read_text(encoding="utf-8") + "\n", encoding="utf-8")
    _data, problems = read_problems(project)
    assert [p.name for p in problems] == ["$.corpus.sha256"]
    assert "the corpus changed since it was frozen" in problems[0].why


def test_validate_lists_every_campaign_problem(project: Path) -> None:
    edit_campaign(project, lambda d: (_twice(d), _control(d)))
    before = tree_snapshot(project)
    result = invoke("validate", project)
    assert result.exit_code == 2
    lines = [line for line in result.stderr.splitlines() if "campaign.json" in line]
    assert [line.split(": ")[1] for line in lines] == ["$.variants[2].name", "$.control"]
    assert tree_snapshot(project) == before


def test_a_fresh_project_still_validates(project: Path) -> None:
    result = invoke("validate", project)
    assert result.exit_code == 0, result.output


# ---------------------------------------------------------------- variants against the threshold and the control


def test_variants_against_threshold_and_control(project: Path) -> None:
    runs = project / "runs"
    pilot_run(runs, "20261204T070000Z-00000000", quality=0.80)  # the control: config/pilot.json
    train_run(runs, "train-20261204-080000", variant="fine-tuned", metrics={"quality": 0.91})
    train_run(runs, "train-20261204-090000", variant="high-lr", metrics={"quality": 0.62})
    status = campaign_status(project)
    rows = {v["name"]: v for v in status["variants"]}
    assert rows["control"]["value"] == 0.80 and rows["control"]["passed"] is False and rows["control"]["control"]
    assert rows["fine-tuned"]["passed"] is True and rows["fine-tuned"]["vs_control"] == pytest.approx(0.11)
    assert rows["high-lr"]["passed"] is False and rows["high-lr"]["vs_control"] == pytest.approx(
        -0.18)
    assert all(row["done"] for row in rows.values()) and status["remaining_hours"]["total"] == 0
    assert status["conclusion"] == "fine-tuned reaches 0.85 (best: fine-tuned, quality 0.91): the question is answered"


def test_lower_is_better_turns_the_comparison(project: Path) -> None:
    edit_campaign(project, lambda d: d.update(metric="loss", threshold=0.2, higher_is_better=False))
    # loss 0.1
    train_run(project / "runs", "train-20261204-080000", variant="fine-tuned", metrics={})
    rows = {v["name"]: v for v in campaign_status(project)["variants"]}
    assert rows["fine-tuned"]["value"] == 0.1 and rows["fine-tuned"]["passed"] is True


def test_a_negative_result_is_a_result(project: Path) -> None:
    runs = project / "runs"
    pilot_run(runs, "20261204T070000Z-00000000", quality=0.70)
    train_run(runs, "train-20261204-080000", variant="fine-tuned", metrics={"quality": 0.80})
    campaign = load_campaign(project)
    assert campaign is not None
    open_now = conclusion(campaign, variant_results(project, campaign))
    assert open_now == "no variant reaches 0.85 yet; 1 not measured (high-lr): the question is open"
    append_decision(project, "cut high-lr", "the fine-tuned variant is below the bar already")
    assert conclusion(campaign, variant_results(project, campaign)) == \
        "no variant reaches 0.85: the question is answered"
    train_run(runs, "train-20261204-090000", variant="high-lr", metrics={"quality": 0.5})
    assert campaign_status(
        project)["conclusion"] == "no variant reaches 0.85: the question is answered"


def test_the_newest_passing_run_counts_not_the_best(project: Path) -> None:
    runs = project / "runs"
    train_run(runs, "train-20261204-080000", variant="fine-tuned", metrics={"quality": 0.95})
    train_run(runs, "train-20261204-090000", variant="fine-tuned", metrics={"quality": 0.81})
    train_run(runs, "train-20261204-100000", variant="fine-tuned",
              metrics={"quality": 0.99}, verdict="fail")
    row = next(v for v in campaign_status(project)["variants"] if v["name"] == "fine-tuned")
    assert row["value"] == 0.81 and row["run"] == "train-20261204-090000" and len(row["runs"]) == 3


def test_a_run_edited_after_closing_or_never_closed_does_not_count(project: Path) -> None:
    runs = project / "runs"
    folder = train_run(runs, "train-20261204-080000", variant="fine-tuned",
                       metrics={"quality": 0.5})
    summary = json.loads((folder / "summary.json").read_text(encoding="utf-8"))
    summary["metrics"]["quality"] = 0.99
    write_json(folder / "summary.json", summary)
    train_run(runs, "train-20261204-090000", variant="high-lr",
              metrics={"quality": 0.99}, closed=False)
    rows = {v["name"]: v for v in campaign_status(project)["variants"]}
    assert rows["fine-tuned"]["value"] is None and not rows["fine-tuned"]["done"]
    assert rows["high-lr"]["value"] is None and not rows["high-lr"]["done"]


def test_a_run_belongs_to_a_variant_by_its_config_file(project: Path) -> None:
    (project / "config" / "wide.json").write_text("{}\n", encoding="utf-8")
    edit_campaign(project, lambda d: d["variants"][2].update(config="config/wide.json"))
    train_run(project / "runs", "train-20261204-080000", variant=None, metrics={"quality": 0.9},
              config_file="config/wide.json")
    row = next(v for v in campaign_status(project)["variants"] if v["name"] == "high-lr")
    assert row["runs"] == ["train-20261204-080000"] and row["passed"] is True


# ---------------------------------------------------------------- what remains, the window, what to cut


def test_remaining_work_against_the_window_and_what_to_cut(project: Path) -> None:
    variants(project,
             [("control", "essential", 30), ("more-data", "useful", 20), ("small-lr", "useful", 10),
              ("wild", "exploratory", 12), ("wilder", "exploratory", 6)])
    order = save_order(project)
    train_run(project / "runs", "train-20261204-080000", variant="control",
              metrics={"quality": 0.9},
              started="2026-12-04T00:00:00Z", ended="2026-12-05T00:00:00Z")  # 24 h observed
    status = campaign_status(project, order)
    window = status["window"]
    assert (window["window_hours"], window["booked_hours"],
            window["observed_hours"]) == (72, 48, 24)
    assert window["left_hours"] == 48
    assert status["remaining_hours"] == {"essential": 0, "useful": 30,
                                         "exploratory": 18, "total": 48}
    assert status["cut_first"] == ["wild",
                                   "wilder", "more-data", "small-lr"] and status["to_cut"] == []
    assert "it fits" in status["advice"]
    train_run(project / "runs", "train-20261205-000000", variant="small-lr", metrics={},
              verdict="fail",
              # 16 h more, small-lr to rerun
              started="2026-12-05T00:00:00Z", ended="2026-12-05T16:00:00Z")
    status = campaign_status(project, order)
    assert status["window"]["left_hours"] == 32 and status["remaining_hours"]["total"] == 48
    assert status["to_cut"] == ["wild", "wilder"] and "cut wild, wilder first" in status["advice"]


def test_essential_work_is_never_proposed_for_a_cut(project: Path) -> None:
    variants(project, [("control", "essential", 80), ("extra", "exploratory", 1)])
    status = campaign_status(project, save_order(project))
    assert status["to_cut"] == [
        "extra"] and "the essential work alone (80 h) exceeds" in status["advice"]


def test_a_cut_variant_no_longer_remains(project: Path) -> None:
    before = campaign_status(project)["remaining_hours"]
    append_decision(project, "cut high-lr", "out of time")
    after = campaign_status(project)
    assert after["remaining_hours"]["exploratory"] == 0 < before["exploratory"]
    assert "high-lr" not in after["cut_first"]
    assert next(v for v in after["variants"] if v["name"] == "high-lr")["cut"] is True


def test_the_order_campaign_json_names_is_read(project: Path) -> None:
    save_order(project)
    edit_campaign(project, lambda d: d.update(order="order.json"))
    assert campaign_status(project)["window"]["window_hours"] == 72
    (project / "order.json").unlink()
    with pytest.raises(BadInput, match="the order file is not there"):
        campaign_status(project)


# ---------------------------------------------------------------- the updated duration estimate


def test_a_real_pilot_updates_the_duration_estimate(project: Path) -> None:
    assert campaign_status(project)["estimate"] is None
    result = invoke("pilot", project)
    assert result.exit_code == 0, result.output
    run = next((project / "runs").iterdir())
    timings = json.loads((run / "summary.json").read_text(encoding="utf-8"))["timings"]
    rate = timings["items"] / (timings["app_seconds"] + timings["harness_seconds"])
    status = campaign_status(project)
    est = status["estimate"]
    assert est["source"] == "pilot" and est["run"] == run.name and est["corpus_items"] == 12
    assert est["items_per_second"] == pytest.approx(rate, rel=1e-3)
    assert est["factor"] == pytest.approx(50 / rate, rel=1e-3)
    rows = {v["name"]: v for v in status["variants"]}
    assert rows["fine-tuned"]["updated_hours"] == pytest.approx(4 * 50 / rate, rel=1e-3)
    # quality 1.0 on the template
    assert rows["control"]["done"] and rows["control"]["passed"] is True
    assert status["remaining_hours"]["useful"] == pytest.approx(4 * 50 / rate, rel=1e-3)


def test_a_sweep_gives_the_rate_when_no_pilot_did(project: Path) -> None:
    edit_campaign(project, lambda d: d["corpus"].update(items=36000))
    folder = project / "runs" / "sweep-20261204-080000"
    folder.mkdir(parents=True)
    rows = [{"group": g, "batch_size": b, "completed": 10, "seconds": s, "errors": e}
            for g, b, s,
            e in (("short", 1, 1.0, 0), ("long", 1, 3.0, 0), ("short", 8, 0.1, 0),
                  ("long", 8, 0.4, 1),
                  ("short", 4, 0.2, 0), ("long", 4, 0.3, 0))]
    write_json(folder / "sweep.json", {"rows": rows})
    # batch 4: 20 items in 0.5 s; batch 8 had an error
    assert sweep_rate(folder) == pytest.approx(40.0)
    est = campaign_status(project)["estimate"]
    assert (est["source"], est["items_per_second"], est["hours_per_pass"],
            est["factor"]) == ("sweep", 40, 0.25, 1.25)


# ---------------------------------------------------------------- decisions: appended, never rewritten


def test_decisions_are_appended_and_never_rewritten(project: Path) -> None:
    first = invoke("campaign", "decide", "continue", project, "--why", "the pilot passed")
    assert first.exit_code == 0, first.output
    log = project / DECISIONS
    kept = log.read_bytes()
    second = invoke("campaign", "decide", "cut high-lr", project,
                    "--why", "2x slower than assumed", "--json")
    assert second.exit_code == 0, second.output
    assert json.loads(second.stdout)["variant"] == "high-lr"
    third = invoke("campaign", "decide", "change the question",
                   project, "--why", "the control is enough")
    assert third.exit_code == 0
    assert log.read_bytes().startswith(kept)
    decisions = read_decisions(project)
    assert [(d["decision"], d["variant"])
            for d in decisions] == [("continue", None), ("cut", "high-lr"),
                                                                   ("change the question", None)]
    assert all(d["at"].endswith("Z")
               for d in decisions) and decisions[1]["why"] == "2x slower than assumed"
    status = invoke("campaign", project)
    assert status.exit_code == 0 and "cut high-lr: 2x slower than assumed" in status.stdout


@pytest.mark.parametrize(("args", "said"), [
    (("cut nope", "--why", "x"), "cut 'nope': "),
    (("cut high-lr", "--why", "   "), "--why: empty"),
    (("cut high-lr",), "--why: empty"),
    (("stop everything", "--why", "x"), "not a decision"),
    (("cut", "--why", "x"), "quote the decision"),
])
def test_a_bad_decision_writes_nothing(project: Path, args: tuple[str, ...], said: str) -> None:
    append_decision(project, "continue", "a first decision")
    before = tree_snapshot(project)
    result = invoke("campaign", "decide", args[0], project, *args[1:])
    assert result.exit_code == 2 and result.stderr.count(
        "\n") == 1 and said in result.stderr, result.stderr
    assert tree_snapshot(project) == before


def test_a_bad_decision_creates_no_log(project: Path) -> None:
    result = invoke("campaign", "decide", "cut nope", project, "--why", "x")
    assert result.exit_code == 2 and not (project / DECISIONS).exists()
    unquoted = invoke("campaign", "decide", "cut", "high-lr", project, "--why", "x")
    assert unquoted.exit_code == 2 and "quote the decision" in unquoted.stderr
    stray = invoke("campaign", project, "--why", "x")
    assert stray.exit_code == 2 and not (project / DECISIONS).exists()


def test_a_line_cut_short_by_a_kill_stays_apart(project: Path) -> None:
    append_decision(project, "continue", "first")
    log = project / DECISIONS
    with log.open("ab") as handle:
        handle.write(b'{"at": "2026-12-04T09:00:00Z", "decis')  # a kill in the middle of a write
    append_decision(project, "cut high-lr", "second")
    decisions, unreadable = decision_log(project)
    assert [d["why"] for d in decisions] == ["first", "second"] and unreadable == [2]
    assert campaign_status(project)["unreadable_decision_lines"] == [2]


def test_a_decision_log_that_is_a_link_is_refused(project: Path, tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere.jsonl"
    elsewhere.write_text("", encoding="utf-8")
    os.symlink(elsewhere, project / DECISIONS)
    with pytest.raises(BadInput, match="not a regular file"):
        append_decision(project, "continue", "x")
    assert elsewhere.read_text(encoding="utf-8") == ""


def test_text_from_the_files_is_printed_escaped(project: Path) -> None:
    edit_campaign(project, lambda d: d.update(question="Does it\u202e work?"))
    _data, problems = read_problems(project)
    # a config string is one plain line (kdkit.config.schemas)
    assert [p.name for p in problems] == ["$.question"]
    edit_campaign(project, lambda d: d.update(question="Does it work?"))
    append_decision(project, "continue", "because\u202e\x1b[31m red")
    result = invoke("campaign", project)
    assert result.exit_code == 0 and "\u202e" not in result.stdout and "\x1b" not in result.stdout
    assert "because" in result.stdout


def test_validate_checks_config_train_json_by_its_model(project: Path) -> None:
    pytest.importorskip("kdkit.core.trainconfig")
    train = project / "config" / "train.json"
    train.write_text('{"max_lost_minutes": 20}\n', encoding="utf-8")
    assert invoke("validate", project).exit_code == 0
    train.write_text('{"max_lost_minutes": NaN}\n', encoding="utf-8")
    before = tree_snapshot(project)
    result = invoke("validate", project)
    assert result.exit_code == 2 and f"{train}: " in result.stderr
    assert tree_snapshot(project) == before
