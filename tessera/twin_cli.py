"""`tessera twin ...`: run, validate, sweep and fit the adapter-server digital twin."""

from __future__ import annotations

import json
import sys
import os
import time
from pathlib import Path

import click
import numpy as np
import yaml
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table

from tessera.options import SEED, WORKERS, BoundedInt, FiniteFloat, OutputFile
from tessera.planner.input_files import InputError
from tessera.planner.twin.kernel import KernelUnavailable
from tessera.planner.twin.sim import OUTSTANDING_REQUEST_CAP, STARVATION_RATIO

console = Console(width=None if sys.stdout.isatty() else 150)


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TimeElapsedColumn(), TimeRemainingColumn(), console=console)


# What the offline extra installs; the runtime (operator, plan, twin run/predict) needs none.
OFFLINE_PACKAGES = {"sklearn", "pyarrow", "matplotlib"}


class _TwinGroup(click.Group):
    """Names the extra a command needs when it is missing: offline (training, validation, plots), numba
    (the twin's kernel where no C build exists)."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except KernelUnavailable as error:
            raise click.ClickException(str(error)) from None
        except ModuleNotFoundError as error:
            if (error.name or "").split(".")[0] not in OFFLINE_PACKAGES:
                raise
            raise click.ClickException(
                f"this command needs {error.name}, part of tessera's offline tools: "
                "pip install 'tessera[offline]'") from None


@click.group(cls=_TwinGroup)
def twin() -> None:
    """Digital twin of a multi-LoRA vLLM server (adapter pools)."""


def _profile_of(spec, file: Path):
    """The workload's model profile; a profile that cannot be loaded names the workload file too."""
    from tessera.planner.twin.profile import load_profile

    try:
        return load_profile(spec.model)
    except InputError as error:
        raise InputError(f"{file}: model: {error}") from None


@twin.command("run")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--seed", type=SEED, default=0, show_default=True)
@click.option("--png", type=OutputFile(), default=None, help="write a timeline PNG here")
@click.option("--json-out", type=OutputFile(), default=None, help="write the summary as JSON")
def run_cmd(file: Path, seed: int, png: Path | None, json_out: Path | None) -> None:
    """Simulate the workload in FILE (YAML) and print a summary table."""
    from tessera.planner.twin.files import load_workload_file
    from tessera.planner.twin.sim import ServerConfig, simulate

    spec = load_workload_file(file)
    w = spec.workload()
    prof = _profile_of(spec, file)
    cfg = ServerConfig(max_loras=spec.max_loras, max_rank=spec.server_max_rank(), outstanding_cap=spec.outstanding_cap,
                       max_num_seqs=spec.max_num_seqs, max_num_batched_tokens=spec.max_num_batched_tokens)
    with _progress() as prog:
        # the bar counts simulated seconds, updated while the kernel runs
        task = prog.add_task(f"simulating {w.duration_s:.0f} s", total=round(w.duration_s))
        t0 = time.perf_counter()
        res = simulate(w, prof, cfg, seed=seed,
                       progress=lambda ts: prog.update(task, completed=min(round(ts), round(w.duration_s))))
        wall = time.perf_counter() - t0
        prog.update(task, completed=round(w.duration_s))
    table = Table(title=f"{prof.model}: {w.n_adapters} adapters, A_max={cfg.max_loras}")
    table.add_column("metric")
    table.add_column("value", justify="right")
    if res.memory_error:
        table.add_row("memory error", f"server refuses to start: KV {res.kv_tokens} tokens < max_model_len {prof.max_model_len}")
    else:
        rows = [("throughput tok/s", f"{res.throughput_tok_s:.1f}"), ("offered tok/s", f"{res.offered_tok_s:.1f}"),
                ("throughput / offered", f"{res.ratio:.3f}"), (f"starved (< {STARVATION_RATIO})", str(res.starved)),
                ("min served fraction of an adapter", f"{res.min_served_fraction:.3f}"),
                (f"adapters served < {STARVATION_RATIO}",
                 str(int(np.sum(res.served_fraction < STARVATION_RATIO)))),
                ("arrivals / finished / dropped", f"{res.arrivals} / {res.finished} / {res.dropped}"),
                ("TTFT mean / p99 ms", f"{res.ttft_mean_ms:.1f} / {res.ttft_p99_ms:.1f}"),
                ("ITL mean / p99 ms", f"{res.itl_mean_ms:.1f} / {res.itl_p99_ms:.1f}"),
                ("preemptions", str(res.preemptions)), ("adapter loads", str(res.loads)),
                ("mean / max running", f"{res.mean_running:.1f} / {res.max_running}"),
                ("mean / max waiting", f"{res.mean_waiting:.1f} / {res.max_waiting}"),
                ("mean KV usage", f"{res.mean_kv_usage:.3f} of {res.kv_tokens} tokens"),
                ("wall clock s (x realtime)", f"{wall:.2f} ({w.duration_s / max(wall, 1e-9):.0f}x)")]
        for k, v in rows:
            table.add_row(k, v)
    console.print(table)
    if json_out:
        json_out.write_text(json.dumps({k: (v.item() if hasattr(v, "item") else v) for k, v in res.summary().items()}, indent=2))
    if png and not res.memory_error:
        from tessera.planner.twin.plot import timeline_png

        timeline_png(res, png, title=f"{prof.model}, {w.n_adapters} adapters, A_max={cfg.max_loras}")
        console.print(f"timeline written to {png}")


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


@twin.command("predict")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option("--twin", "with_twin", is_flag=True, help="also simulate the workload (one hour) and show both")
def predict_cmd(file: Path, with_twin: bool) -> None:
    """Predict the workload in FILE with the compiled predictors (microseconds; what placement uses)."""
    from tessera.planner.predictors.workload_features import TOKENS_PER_REQUEST
    from tessera.planner.predictors.predict import predict
    from tessera.planner.twin.files import load_workload_file
    from tessera.planner.twin.sweep import SWEEP_DURATION, simulate_as_swept

    spec = load_workload_file(file)
    problem = spec.arrivals_over_limit(SWEEP_DURATION) if with_twin else None
    if problem:
        raise InputError(f"{file}: adapters: --twin simulates one hour: {problem}")
    w = spec.workload()
    prof = _profile_of(spec, file)
    a_max = spec.max_loras
    max_rank = spec.server_max_rank()
    table = Table(title=f"{prof.model}: {w.n_adapters} adapters, A_max={a_max}, max rank {max_rank}")
    table.add_column("")
    table.add_column("predictors", justify="right")
    if with_twin:
        table.add_column("twin (one hour, seed 0)", justify="right")
    if prof.refuses_to_start(a_max, max_rank):
        table.add_row("memory error", "server refuses to start", *(["(not simulated)"] if with_twin else []))
        console.print(table)
        return
    ratio, starved = predict(w.ranks, w.rates, a_max, prof.model, prof.kv_tokens(a_max, max_rank))
    offered = float(w.rates.sum()) * TOKENS_PER_REQUEST
    rows = [["throughput / offered", f"{ratio:.3f}"], ["throughput tok/s", f"{ratio * offered:.0f}"],
            [f"starved (< {STARVATION_RATIO})", str(starved)]]
    if with_twin:
        res = simulate_as_swept(prof, w.ranks, w.rates, a_max, seed=0, max_rank=max_rank)
        for row, value in zip(rows, [f"{res.ratio:.3f}", f"{res.throughput_tok_s:.0f}", str(res.starved)]):
            row.append(value)
    for row in rows:
        table.add_row(*row)
    console.print(table)
    console.print(f"offered {offered:.0f} tok/s at the workload's mean request length ({TOKENS_PER_REQUEST:.0f} "
                  f"tokens); the predictors were trained on one-hour twin runs with a {OUTSTANDING_REQUEST_CAP}-request client cap")


@twin.command("validate")
@click.option("--seeds", type=BoundedInt(1, 100), default=5, show_default=True,
              help="pairings of rank and rate averaged per run")
@click.option("--workers", type=WORKERS, default=2, show_default=True)
@click.option("--runs-csv", type=click.Path(exists=True, path_type=Path), default=None)
@click.option("--out", type=OutputFile(), default=None, help="write per-run rows as JSON")
@click.option("--limit", type=BoundedInt(1, 10_000), default=None, help="only the first N runs of each half (quick check)")
@click.option("--png", type=OutputFile(), default=None, help="write real-vs-twin plots here")
def validate_cmd(seeds: int, workers: int, runs_csv: Path | None, out: Path | None, limit: int | None,
                 png: Path | None) -> None:
    """Replay every real Qwen run: calibrate on one max-rank half, judge on the other."""
    from tessera.planner.twin import validate
    from tessera.planner.twin.profile import load_profile

    runs = validate.load_runs(runs_csv)
    if limit:
        runs = [r for r in runs if r.max_rank == 16][:limit] + [r for r in runs if r.max_rank == 32][:limit]
    base = load_profile("qwen")
    with _progress() as prog:
        task = prog.add_task("replaying real runs", total=len(runs) * seeds)
        rows, fitted = validate.cross_validate(base, runs, seeds=seeds, workers=workers,
                                        progress=lambda: prog.advance(task))
    t = Table(title="real vs twin, per run (validation halves)")
    for c in ["adapters", "A_max", "rank", "rate mix", "real tok/s", "twin tok/s", "err", "dt err",
              "starved real/twin/dt"]:
        t.add_column(c, justify="right")
    for x in rows:
        t.add_row(str(x.n_adapters), str(x.max_loras), str(x.max_rank), "low" if x.low_rate else "high",
                  f"{x.real_throughput:.0f}", f"{x.twin_throughput:.0f}",
                  _pct(x.err), _pct(x.dt_err) if np.isfinite(x.dt_err) else "-",
                  f"{int(x.real_starved)}/{int(x.twin_starved)}/{int(x.dt_starved)}")
    console.print(t)
    summ = validate.summarize(rows)
    s = Table(title=f"summary ({seeds} seeds per run; fit on one max-rank half, judged on the other)")
    for c in ["runs", "n", "median err", "p90 err", "dt median", "dt p90", "starv. agree", "dt agree"]:
        s.add_column(c, justify="right", no_wrap=True)
    for group, v in summ.items():
        s.add_row(group, str(v.n), _pct(v.median), _pct(v.p90), _pct(v.dt_median), _pct(v.dt_p90),
                  f"{v.agree}/{v.n}", f"{v.dt_agree}/{v.n}")
    console.print(s)
    for k, p in fitted.items():
        console.print(f"fitted on max-rank {k}: step={p.step} overhead={p.overhead} lengths={p.lengths}")
    if png:
        from tessera.planner.twin.plot import validation_png

        validation_png(rows, png)
        console.print(f"plots written to {png}")
    if out:
        out.write_text(json.dumps(validate.validation_report(rows, fitted), indent=1))


@twin.command("memory")
@click.option("--kv-csv", type=click.Path(exists=True, path_type=Path), default=None)
def memory_cmd(kv_csv: Path | None) -> None:
    """Check the shipped memory models against kv_capacity.csv (refusals to start and error)."""
    from tessera.planner.twin.profile import check_memory_model, load_profile, read_kv_capacity
    from tessera.planner.twin.validate import find_data_dir

    path = kv_csv or find_data_dir() / "kv_capacity.csv"
    t = Table(title="memory model vs kv_capacity.csv")
    for c in ["model", "configs", "refusals real", "refusals twin", "agree", "median abs err", "max abs err"]:
        t.add_column(c, justify="right")
    for m in ["qwen", "llama"]:
        prof = load_profile(m)
        check = check_memory_model(prof, read_kv_capacity(path, prof.model))
        t.add_row(check.model, str(check.configs), str(check.refused_measured), str(check.refused_predicted),
                  f"{check.agree}/{check.configs}", _pct(check.median_error), _pct(check.max_error))
    console.print(t)


@twin.command("fit-memory")
@click.argument("kv_csv", type=click.Path(exists=True, path_type=Path))
@click.option("--model", required=True)
def fit_memory_cmd(kv_csv: Path, model: str) -> None:
    """Fit the memory model of MODEL from a kv_capacity-style CSV; prints the YAML section."""
    from tessera.planner.twin.profile import fit_memory_model, read_kv_capacity

    console.print(yaml.safe_dump({"memory": fit_memory_model(read_kv_capacity(kv_csv, model)).model_dump()}))


@twin.command("calibrate")
@click.option("--model", default="qwen", show_default=True)
@click.option("--max-rank", type=BoundedInt(1, 512), default=None, help="fit on the runs of this max rank only")
@click.option("--out", type=OutputFile(), required=True, help="profile YAML to write")
def calibrate_cmd(model: str, max_rank: int | None, out: Path) -> None:
    """Fit the step-time coefficients and length model of a profile from qwen_runs.csv."""
    from tessera.planner.twin import validate
    from tessera.planner.twin.profile import load_profile

    runs = [r for r in validate.load_runs() if max_rank is None or r.max_rank == max_rank]
    p = validate.calibrate(runs, load_profile(model))
    p.save(out)
    console.print(f"wrote {out}: step={p.step} overhead={p.overhead} slot_fill={p.slot_fill} lengths={p.lengths}")


@twin.command("sweep")
@click.option("--out-dir", type=click.Path(file_okay=False, path_type=Path), default=Path("bench/results/sweep"), show_default=True)
@click.option("--configs", "n_configs", type=BoundedInt(1, 100_000), default=3000, show_default=True)
@click.option("--workers", type=WORKERS, default=min(2, os.cpu_count() or 1), show_default=True)
@click.option("--merge-to", type=OutputFile(), default=None, help="join the parts into this parquet file")
def sweep_cmd(out_dir: Path, n_configs: int, workers: int, merge_to: Path | None) -> None:
    """Generate the predictors' training set (resumable; parts under OUT_DIR)."""
    from tessera.planner.twin.sweep import merge, run_sweep

    t0 = time.perf_counter()
    with _progress() as prog:
        task = prog.add_task("twin sweep", total=n_configs)
        run_sweep(out_dir, n_configs, workers=workers, progress=lambda k: prog.advance(task, k))
    dt = time.perf_counter() - t0
    console.print(f"{n_configs} configurations in {out_dir} ({dt:.0f} s this session)")
    if merge_to:
        n = merge(out_dir, merge_to)
        console.print(f"merged {n} rows into {merge_to}")


@twin.command("reseed")
@click.option("--extra", type=BoundedInt(1, 20), default=2, show_default=True, help="more seeds per workload")
@click.option("--band", type=FiniteFloat(0, 1), default=0.05, show_default=True,
              help="re-run workloads with |ratio - 0.9| below this")
@click.option("--workers", type=WORKERS, default=min(2, os.cpu_count() or 1), show_default=True)
def reseed_cmd(extra: int, band: float, workers: int) -> None:
    """Re-simulate the sweep's near-threshold workloads with more seeds (denoised labels; resumable)."""
    from tessera.planner.predictors import train
    from tessera.planner.twin.sweep import run_reseed

    ids = train.near_threshold_ids(band)
    with _progress() as prog:
        task = prog.add_task(f"{len(ids)} workloads x {extra} seeds", total=len(ids) * extra)
        n = run_reseed(train.SEEDS, ids, extra=extra, workers=workers, progress=lambda k: prog.advance(task, k))
    console.print(f"{n} extra-seed rows in {train.SEEDS}")


@twin.command("train")
@click.option("--data", type=click.Path(exists=True, path_type=Path), default=None)
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), default=Path("bench/results/predictors.json"), show_default=True)
@click.option("--no-compile", is_flag=True, help="only report metrics; leave _compiled.py as it is")
def train_cmd(data: Path | None, out: Path, no_compile: bool) -> None:
    """Train the predictors on the sweep, report held-out and real-run metrics, compile the trees."""
    from tessera.planner.predictors import train

    tr = train.train(data or train.DATA)
    real = train.evaluate_on_real(tr)
    t = Table(title="predictors on held-out twin levels (A_max %s, adapters %s) and on the real runs"
              % (list(train.HELD_OUT_A), list(train.HELD_OUT_N)))
    for c in ["set", "n", "SMAPE ratio", "SMAPE unstarved", "SMAPE starved", "starvation macro-F1"]:
        t.add_column(c, justify="right")
    m = tr.metrics
    t.add_row("held-out twin", str(m["n_test"]), _pct(m["smape_ratio"]), _pct(m["smape_ratio_unstarved"]),
              _pct(m["smape_ratio_starved"]), f"{m['macro_f1']:.3f}")
    t.add_row("real Qwen runs", str(real["n"]), _pct(real["smape_ratio"]), _pct(real["smape_ratio_unstarved"]),
              _pct(real["smape_ratio_starved"]), f"{real['macro_f1']:.3f}")
    console.print(t)
    console.print(f"single ratio tree SMAPE {_pct(m['smape_ratio_single_tree'])}; leaves: ratio {m['reg_leaves']}, "
                  f"starved {m['clf_leaves']}, capacity {m['cap_leaves']}")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"held_out": m, "real_runs": real}, indent=2, default=list))
    if not no_compile:
        final = train.train(data or train.DATA, all_rows=True)  # shipped trees: every level
        final.metrics = {"held_out": m, "real_runs": real}
        train.compile_trained(final)
        console.print(f"compiled trees written to {train.COMPILED}")


@twin.command("predict-runs")
@click.option("--model", default="llama", show_default=True)
@click.option("--seeds", type=BoundedInt(1, 100), default=2, show_default=True)
@click.option("--workers", type=WORKERS, default=2, show_default=True)
@click.option("--out", type=OutputFile(), default=None)
def predict_runs_cmd(model: str, seeds: int, workers: int, out: Path | None) -> None:
    """Predict the real runs' configurations for another model (no measurements: its profile alone)."""
    from tessera.planner.twin import validate
    from tessera.planner.twin.profile import load_profile

    prof = load_profile(model)
    runs = validate.load_runs()
    with _progress() as prog:
        task = prog.add_task(f"{prof.model}: replaying run configurations", total=len(runs) * seeds)
        table = validate.replay(runs, prof, seeds=seeds, workers=workers, progress=lambda: prog.advance(task))
    t = Table(title=f"{prof.model} predicted on the real runs' configurations (Qwen measured beside it)")
    for c in ["adapters", "A_max", "rank", "rate mix", "Qwen real tok/s", f"{model} twin tok/s", "ratio",
              "starved", "memory error"]:
        t.add_column(c, justify="right")
    rows = validate.predict_runs(runs, table)
    for x in rows:
        t.add_row(str(x.n_adapters), str(x.max_loras), str(x.max_rank), "low" if x.low_rate else "high",
                  f"{x.qwen_real:.0f}", "-" if x.memory_error else f"{x.twin:.0f}",
                  "-" if x.memory_error else f"{x.ratio:.3f}", str(x.starved), str(x.memory_error))
    console.print(t)
    me = sum(x.memory_error for x in rows)
    st = sum(x.starved for x in rows)
    console.print(f"{len(rows)} configurations: {me} refuse to start (memory), {st} starved, "
                  f"{len(rows) - me - st} healthy")
    if out:
        out.write_text(json.dumps([x.model_dump() for x in rows], indent=1))
