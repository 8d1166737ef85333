"""Tables of the study's tools' outputs under ``results/<level>/``: compare_speakers, pragmatic_speakers,
probe_speaker, probe_follower, objective_gradients, validation_table, bleu_scales and label_by_parts."""

from __future__ import annotations

import json
import re
import statistics
from pathlib import Path

from cells import row_label, run_row

from .records import RESULTS, mean_sd, read_json


def table_speakers(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """experiments/compare_speakers.py's JSON: BLEU with its bootstrap interval, p against the first speaker,
    and how often the action words and the object words are the reference's, in order."""
    data = read_json(level, name, root)
    first = next(iter(data["speakers"]))
    lines = [f"| speaker | BLEU-4 ({data['examples']} {data['split']} pairs) | 95% CI | p vs {first} | "
             "action sequence right | object sequence right |", "| --- | --- | --- | --- | --- | --- |"]
    for label, s in data["speakers"].items():
        p = "-" if s["p_value"] is None else f"{s['p_value']:.3f}"
        lines.append(f"| {label} | {s['bleu']:.2f} | +-{s['ci']:.2f} | {p} | {s['parts_match']['actions']:.3f} | "
                     f"{s['parts_match']['objects']:.3f} |")
    return lines


def table_pragmatics(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """experiments/pragmatic_speakers.py's JSON: test BLEU greedy, beam and rescored (lam chosen on valid)."""
    data = read_json(level, name, root)
    over = data["over_seeds"]
    lines = ["| speaker + follower | " + " | ".join(over) + " |", "| --- |" + " --- |" * len(over)]
    for system in next(iter(over.values())):
        cells = [mean_sd(over[m][system]["values"], 2) if system in over[m] else "-" for m in over]
        lines.append(f"| {system} | " + " | ".join(cells) + " |")
    return lines


def table_probes(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """experiments/probe_speaker.py's JSON: linear-probe accuracy of the object faced at the end."""
    data = read_json(level, name, root)
    probes = [k for k, v in next(iter(data["models"].values())).items() if isinstance(v, dict)]
    lines = ["| model | " + " | ".join(probes) + " |", "| --- |" + " --- |" * len(probes)]
    for label, m in data["models"].items():
        lines.append(f"| {label} | " + " | ".join(f"{m[p]['accuracy']:.3f} (majority {m[p]['majority']:.3f})"
                                                  for p in probes) + " |")
    return lines


def table_follower_probe(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """experiments/probe_follower.py's JSON, its models named ``<row>, seed <k>``: per row, mean +- sd over seeds
    of the SR told each episode's own mission and another's, their difference, and the teacher-forced loss per
    step with each pair's own instruction and another pair's."""
    data = read_json(level, name, root)
    rows: dict[str, list[dict]] = {}
    for model_name, m in data["models"].items():
        if "rollouts" not in m:
            raise SystemExit(f"{name}.json: {model_name!r} has no rollouts; run probe_follower.py with --rollouts N")
        rows.setdefault(model_name.rsplit(", seed ", 1)[0], []).append(m)
    episodes = {m["rollouts"]["episodes"] for runs in rows.values() for m in runs}
    lines = [f"| follower | SR told its own mission (%) | told another episode's (%) | difference (points) | "
             f"NLL / step, own instruction | another pair's ({data['split']} pairs) |",
             "| --- | --- | --- | --- | --- | --- |"]
    for row, runs in rows.items():
        own = [100 * m["rollouts"]["success_rate_own"] for m in runs]
        other = [100 * m["rollouts"]["success_rate_other"] for m in runs]
        lines.append(f"| {row_label(level, row)} | {mean_sd(own)} | {mean_sd(other)} | "
                     f"{mean_sd([a - b for a, b in zip(own, other, strict=True)])} | "
                     f"{mean_sd([m['nll_own'] for m in runs], 3)} | {mean_sd([m['nll_other'] for m in runs], 3)} |")
    lines.append(f"\nRollouts on the first {', '.join(map(str, sorted(episodes)))} test seeds each.")
    return lines


def table_follower_probe_by_goals(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """experiments/probe_follower.py's JSON, its rollouts by the number of goals in each episode's own mission
    (``by_goal_count``), its models named ``<row>, seed <k>``: per row and number of goals, the episodes and mean
    +- sd over seeds of the SR told its own mission and another episode's, and their difference."""
    data = read_json(level, name, root)
    rows: dict[str, dict[str, list[dict]]] = {}
    for model_name, m in data["models"].items():
        by_count = (m.get("rollouts") or {}).get("by_goal_count")
        if not by_count:
            raise SystemExit(f"{name}.json: {model_name!r} has no rollouts by goal count; run "
                             "experiments/probe_follower.py with --rollouts N")
        for count, scores in by_count.items():
            rows.setdefault(model_name.rsplit(", seed ", 1)[0], {}).setdefault(count, []).append(scores)
    lines = ["| follower | goals in the mission | episodes | SR told its own mission (%) | told another episode's (%) "
             "| difference (points) |", "| --- | --- | --- | --- | --- | --- |"]
    for row, counts in rows.items():
        for count, runs in sorted(counts.items(), key=lambda item: int(item[0])):
            own = [100 * r["success_rate_own"] for r in runs]
            other = [100 * r["success_rate_other"] for r in runs]
            episodes = "/".join(sorted({str(r["episodes"]) for r in runs}))
            lines.append(f"| {row_label(level, row)} | {count} | {episodes} | {mean_sd(own)} | {mean_sd(other)} | "
                         f"{mean_sd([a - b for a, b in zip(own, other, strict=True)])} |")
    return lines


#: label_by_parts.py's labellings, in the table's words.
PARTS_LABELLINGS = {"whole": "whole trajectories", "verifier_steps": "by parts, cut at the verifier's goal steps",
                    "read_out_steps": "by parts, cut where its read-out finds goals"}


def table_labels_by_parts(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """experiments/label_by_parts.py's JSON: for each speaker, its labels of the whole trajectories and by parts
    (each cut: the parts described, the whole labels kept), each as the share of the labels that are
    demonstrations, carried out and the same mission, and demonstrations among the trajectories of each number of
    goals in their true mission."""
    data = read_json(level, name, root)
    counts = sorted({int(k) for m in data["models"].values() for s in m["labels"].values()
                     for k in s["by_goal_count"]})
    lines = [f"| speaker | labels of {data['num_unpaired']:,} unpaired trajectories | parts (whole labels kept) | "
             "demonstrated % | carried out % | same mission % | "
             + " | ".join(f"demonstrated, {n} goal{'s' * (n > 1)} %" for n in counts) + " |",
             "| --- " * (6 + len(counts)) + "|"]
    for model, entry in data["models"].items():
        for labelling, scores in entry["labels"].items():
            cut = entry["cuts"].get(labelling)
            parts = f"{cut['parts']:,} ({cut['whole_kept']:,})" if cut else "-"
            by_count = [scores["by_goal_count"].get(str(n), {}).get("demonstrated") for n in counts]
            lines.append(f"| {model} | {PARTS_LABELLINGS[labelling]} | {parts} | "
                         + " | ".join(f"{100 * scores[k]:.1f}" for k in ("demonstrated", "carried_out", "same_mission"))
                         + " | " + " | ".join("-" if v is None else f"{100 * v:.1f}" for v in by_count) + " |")
    return lines


def table_gradients(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """benchmarks/objective_gradients.py's JSON: gradient norms of each objective term on the trajectory
    encoder and the sliced-Wasserstein distances between batches."""
    data = read_json(level, name, root)
    lines = ["| quantity | value |", "| --- | --- |"]
    for key, value in data.items():
        text = f"{value:.4g}" if isinstance(value, float) else str(value)
        lines.append(f"| {key.replace('_', ' ')} | {text} |")
    return lines


def table_gradient_sweep(level: str, names: str, root: Path = RESULTS) -> list[str]:
    """benchmarks/objective_gradients.py's JSONs side by side: each term's gradient norm on q(z|a,o), the alpha at
    which D' pulls as hard as J-bar, and alpha D' against J-bar at each alpha of the sweep."""
    data = {name: read_json(level, name, root) for name in names.split(",")}
    alphas = sorted({a["alpha"] for d in data.values() for a in d.get("alpha_sweep", [])})
    lines = ["| model | reduction | gamma V | J-bar | D' per unit alpha | alpha where D' = J-bar | "
             + " | ".join(f"alpha D' / J-bar at {a:g}" for a in alphas) + " |",
             "| --- | --- | --- | --- | --- | --- | " + " | ".join("---" for _ in alphas) + " |"]
    for d in data.values():  # the norm of alpha D''s gradient is linear in alpha: a file without a sweep has one too
        model = d["model"] if isinstance(d["model"], str) else "MS-VAE from the baselines (App. D)"
        g_j, g_d = d["grad_norm_j_bar"], d["grad_norm_d_per_unit_alpha"]
        lines.append(f"| {model} | {d.get('loss_reduction', 'sum')} | {d['grad_norm_gamma_v']:.4g} | {g_j:.4g} | "
                     f"{g_d:.4g} | {g_j / g_d:.4g} | " + " | ".join(f"{a * g_d / g_j:.3g}" for a in alphas) + " |")
    return lines


def system_name(name: str) -> str:
    """``NAME#k`` (experiments/pragmatic_speakers.py's seed mark) -> ``NAME, seed k``."""
    base, mark, seed = name.rpartition("#")
    return f"{base}, seed {seed}" if mark else name


def table_rescoring(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """experiments/pragmatic_speakers.py's JSON, one line per system and seed: the lam (speaker weight) chosen on
    the valid pairs, test BLEU greedy / beam / rescored with it, the bootstrap p of rescored against greedy, and
    the lam that would have been best on the test pairs."""
    data = read_json(level, name, root)
    lines = [f"| speaker + follower | lam chosen on {data['valid_split']} | test BLEU greedy | test BLEU beam "
             f"(lam = 1) | test BLEU rescored | p rescored vs greedy | lam best on {data['test_split']} | "
             "test BLEU at that lam |", "| --- |" + " --- |" * 7]
    for system, s in data["systems"].items():
        by_lam = {float(k): v for k, v in s["test_bleu_by_lam"].items()}
        best = max(by_lam, key=by_lam.get)
        lines.append(f"| {system_name(system)} | {s['lam']:g} | {s['test_bleu_greedy']:.2f} | "
                     f"{s['test_bleu_beam']:.2f} | {s['test_bleu_rescored']:.2f} | {s['p_rescored_vs_greedy']:.3f} | "
                     f"{best:g} | {by_lam[best]:.2f} |")
    return lines


def table_probe_data(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """experiments/probe_speaker.py's JSON: the trajectories read, those facing an object at their last step,
    and the held-out share each probe was scored on."""
    data = read_json(level, name, root)
    lines = ["| model | trajectories read | facing an object at the last step | held-out examples per probe |",
             "| --- | --- | --- | --- |"]
    for label, m in data["models"].items():
        held_out = sorted({v["test_examples"] for v in m.values() if isinstance(v, dict)})
        lines.append(f"| {label} | {data['examples']} | {m['examples_facing_an_object']} | "
                     f"{', '.join(map(str, held_out))} |")
    return lines


def table_validation(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """A table printed by experiments/validation_table.py (kept as ``FILE.md``, its command in an HTML comment
    on the first line): each row's maximum validation BLEU and SR, its seeds side by side, and their mean."""
    path = root / level / f"{name}.md"
    if not path.exists():
        raise SystemExit(f"no {path}")
    text = path.read_text()
    upto = re.search(r"--upto (\d+)", text)
    within = f", updates <= {upto.group(1)}" if upto else ""
    rows: dict[str, dict[int, tuple[float, float]]] = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 5 or cells[0] in ("run", "---"):
            continue
        row, seed = run_row(cells[0])
        rows.setdefault(row, {})[seed] = (float(cells[2]), float(cells[4]))
    lines = [f"| runs | seeds | max valid BLEU{within} | mean | max valid SR{within} | mean |",
             "| --- | --- | --- | --- | --- | --- |"]
    for row, seeds in rows.items():
        order = sorted(seeds)
        bleus, srs = [seeds[k][0] for k in order], [seeds[k][1] for k in order]
        lines.append(f"| {row_label(level, row)} | {', '.join(map(str, order))} | "
                     f"{' / '.join(f'{b:.1f}' for b in bleus)} | {statistics.fmean(bleus):.1f} | "
                     f"{' / '.join(f'{v:.3f}' for v in srs)} | {statistics.fmean(srs):.3f} |")
    return lines


def table_bleu_scales(level: str, name: str, root: Path = RESULTS) -> list[str]:
    """experiments/bleu_scales.py: each speaker's test descriptions under each BLEU-4 scorer."""
    data = json.loads((root / level / f"{name}.json").read_text())
    scorers = [k for k in data["scorers"]]
    lines = ["| speaker | decoding | " + " | ".join(k.replace("_", " ") for k in scorers) + " |",
             "| --- | --- |" + " --- |" * len(scorers)]
    for speaker, entry in data["speakers"].items():
        label = speaker.removesuffix(" (sampled)")
        decoding = "sampled" if entry.get("decoding", "").startswith("sampled") else "greedy"
        lines.append(f"| {label} | {decoding} | " + " | ".join(f"{entry['scores'][k]:.2f}" for k in scorers) + " |")
    return lines
