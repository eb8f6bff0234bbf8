"""The command line: ``validate``, ``schedule``, ``simulate``, ``plan``, ``experiment``, and the
control plane's ``serve`` and client commands (``suanli.server.commands``).

Bad input exits with status 2 and one line per problem (file:line, document,
field path, what was expected); never a traceback.
"""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from enum import Enum
from pathlib import Path
from typing import List, Optional

import typer
from rich.console import Console
from rich.markup import escape

from suanli.render import MAX_ROWS, OutputFormat, ScheduleOutput, plan_text, why_text
from suanli.spec.problems import Problem, SpecError

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    help="suanli: schedule work onto heterogeneous compute across cloud, edge and devices.",
    pretty_exceptions_enable=False,
)
err = Console(stderr=True, highlight=False)


class PolicyName(str, Enum):
    default = "default"
    random = "random"
    dotprod = "dotprod"
    clustering = "clustering"
    packing = "packing"
    bestfit = "bestfit"
    fgd = "fgd"
    suanli = "suanli"


POLICY = typer.Option(None, "--policy", help="Placement policy (default: the Scenario's policy.placement, else default).")


def _fail(exc: SpecError, what: str = "nothing was scheduled") -> None:
    from suanli.spec.problems import folded

    n = len(exc.problems)
    for line in folded(exc.problems):
        err.print(f"[red]error[/red]: {escape(line)}", markup=True, soft_wrap=True)
    err.print(f"{n} problem{'s' if n != 1 else ''} found; {what}.", soft_wrap=True)
    raise typer.Exit(2)


def _warn(warnings) -> None:
    """A load's warnings (valid, but nothing in the fleet can match them), a
    line each; the same one of many documents once, with how many."""
    from suanli.spec.problems import folded

    for line in folded(warnings):
        err.print(f"[yellow]warning[/yellow]: {escape(line)}", markup=True, soft_wrap=True)


FILES = typer.Argument(..., help="YAML files (several documents each); Scenario includes are followed.")
STRICT = typer.Option(False, "--strict", help="Treat warnings (a demand nothing in the fleet can meet) as errors.")
POPULATION = typer.Option(None, "--population", metavar="NAME=COUNT",
                          help="A population's size in place of its document's (repeatable): cars=1000000.")


def _sizes(values: Optional[List[str]]) -> dict[str, str]:
    """--population NAME=COUNT options as a mapping (each checked when the documents are)."""
    out: dict[str, str] = {}
    for v in values or ():
        name, eq, count = v.partition("=")
        if not eq or not name:
            from suanli.spec.problems import Problem

            _fail(SpecError([Problem(f"--population {v}", "expected NAME=COUNT, e.g. cars=1000000")]),
                  "nothing was done")
        out[name] = count
    return out


@app.command()
def validate(files: List[Path] = FILES, population: Optional[List[str]] = POPULATION, strict: bool = STRICT) -> None:
    """Check documents only: schema, quantities and references."""
    from suanli.spec.loader import load_documents

    try:
        docs = load_documents(files, populations=_sizes(population), strict=strict)
    except SpecError as exc:
        _fail(exc, "the documents are not valid")
    _warn(docs.warnings)
    counts = {
        "fleets": len(docs.fleets),
        "tenants": len(docs.tenants),
        "virtual clusters": len(docs.virtual_clusters),
        "applications": len(docs.applications),
        "scenarios": len(docs.scenarios),
    }
    summary = ", ".join(f"{v} {k}" for k, v in counts.items() if v)
    warned = f" ({len(docs.warnings)} warning{'s' if len(docs.warnings) != 1 else ''})" if docs.warnings else ""
    Console(highlight=False).print(f"ok: {len(docs.files)} file(s), {summary or 'no documents'}{warned}")


@app.command()
def schedule(
    files: List[Path] = FILES,
    output: ScheduleOutput = typer.Option(
        ScheduleOutput.table, "-o", "--output",
        help="table, json, ndjson (one object per line, streamed) or summary (no line per task)"),
    seed: Optional[int] = typer.Option(None, "--seed", help="Tie-break seed (default: the Scenario's, else 0)."),
    policy: Optional[PolicyName] = POLICY,
    population: Optional[List[str]] = POPULATION,
    strict: bool = STRICT,
    workers: Optional[int] = typer.Option(
        None, "--workers", min=1,
        help="Split the pass over this many business shards and a global actor on Ray (the same outcome)."),
    ray_address: Optional[str] = typer.Option(
        None, "--ray", metavar="HOST:PORT",
        help="With --workers: the Ray cluster to run on (default: a local Ray started for the run)."),
) -> None:
    """Place every application once, through both layers, and print the outcome."""
    if workers is not None:
        return _schedule_sharded(files, output, seed, policy, population, strict, workers, ray_address)
    if ray_address is not None:
        _fail(SpecError([Problem("--ray", "names where shards run: give --workers N with it")]))
    from suanli.output import metrics_json, outcome_json, outcome_text_lines
    from suanli.scheduling.static import schedule as run_schedule
    from suanli.spec.build import load_world

    try:
        world = load_world(files, _sizes(population), strict)
    except SpecError as exc:
        _fail(exc)
    _warn(world.warnings)
    with _settled_memory():
        outcome = run_schedule(world, seed, policy.value if policy else None)
    _print_outcome(output, lambda: outcome_text_lines(outcome), lambda: metrics_json(outcome),
                   lambda: outcome_json(outcome))


def _schedule_sharded(files, output, seed, policy, population, strict, workers, address) -> None:
    import os

    from suanli.scheduling.actors import schedule_sharded, start_ray

    sizes = _sizes(population)
    try:
        ray = start_ray(address, max(2, os.cpu_count() or 2))
    except SpecError as exc:
        _fail(exc)
    try:
        try:
            run = schedule_sharded(ray, [str(f) for f in files], sizes or None, strict, seed,
                                   policy.value if policy else None, workers)
        except SpecError as exc:
            _fail(exc)
        _warn(run.warnings)
        report = run.report
        if report["fallback"]:
            err.print(f"note: the shards' answers did not stand ({escape(report['fallback'])}); "
                      "scheduled in one process", soft_wrap=True)
        else:
            took = report["seconds"]
            err.print(f"split: {len(report['shards'])} shard(s) placed {sum(report['shards'])} task(s) alone "
                      f"({', '.join(map(str, report['shards']))}); the global actor decided {report['global']}; "
                      f"loading {took['load']:.1f} s, the global actor's pass {took['global']:.1f} s, "
                      f"the shards' {took['shards']:.1f} s, putting together {took['finish']:.1f} s; peak memory "
                      f"{sum(report['peak_bytes']) / 2**30:.2f} GiB in all (global actor first: "
                      f"{', '.join(f'{b / 2**30:.2f}' for b in report['peak_bytes'])})",
                      soft_wrap=True, highlight=False)
        _print_outcome(output, run.lines, run.summary, run.json)
    finally:
        ray.shutdown()


def _print_outcome(output, lines, summary, document) -> None:
    """Print an outcome as ``output`` asks, from whichever of its forms that needs."""
    if output is ScheduleOutput.ndjson:
        sys.stdout.writelines(lines())
        return
    console = Console(highlight=False)
    if not console.is_terminal:
        console = Console(highlight=False, width=160)  # piped: do not cut names at 80 columns
    if output is ScheduleOutput.summary:
        from suanli.render import print_summary

        print_summary(summary(), console)
        return
    result = document()
    if output is ScheduleOutput.json:
        # compact: json's C encoder is used only without indentation (pipe to `jq` to read)
        sys.stdout.write(json.dumps(result, separators=(",", ":")) + "\n")
    else:
        from suanli.render import print_outcome

        print_outcome(result, console)


@contextmanager
def _settled_memory():
    """While scheduling a loaded world: its objects outlive the pass, so the
    cyclic collector leaves them alone (``gc.freeze``) and runs less often.
    With a million placements, full collections over what only grows took a
    sixth of the scheduling time. Restored afterwards."""
    import gc

    before = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(100_000, 50, 100)
    try:
        yield
    finally:
        gc.set_threshold(*before)
        gc.unfreeze()


def _scenario_world(scenario: Path, command: str, option: str, value: Optional[str],
                    population: Optional[List[str]] = None, strict: bool = False):
    """The world of a scenario file and a time option in seconds; exits 2 with
    one message per problem."""
    from suanli.model.quantities import QuantityError, parse_duration_s
    from suanli.spec.build import load_world
    from suanli.spec.problems import Problem

    try:
        world = load_world([scenario], _sizes(population), strict)
        if world.scenario is None:
            raise SpecError([Problem(str(scenario), f"no Scenario document in this file; {command} needs one")])
        try:
            seconds = None if value is None else parse_duration_s(value)
        except QuantityError as exc:
            raise SpecError([Problem(option, str(exc))]) from None
    except SpecError as exc:
        _fail(exc, {"simulate": "nothing was simulated", "run": "nothing was run"}.get(command, "nothing was planned"))
    _warn(world.warnings)
    return world, seconds


@app.command()
def simulate(
    scenario: Path = typer.Argument(..., help="A file with a Scenario document (its includes are followed)."),
    out: Path = typer.Option(..., "--out", help="Directory for result.json, events.jsonl and report.html."),
    until: Optional[str] = typer.Option(None, "--until", help="Stop at this simulated time (e.g. 2h); default: the Scenario's until."),
    seed: Optional[int] = typer.Option(None, "--seed", help="Random seed (default: the Scenario's)."),
    policy: Optional[PolicyName] = POLICY,
    population: Optional[List[str]] = POPULATION,
    strict: bool = STRICT,
) -> None:
    """Run a scenario in the digital twin and write its results and report."""
    from suanli.sim.results import write_outputs
    from suanli.sim.simulation import Simulation

    world, until_s = _scenario_world(scenario, "simulate", "--until", until, population, strict)
    console = Console(highlight=False, stderr=True)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        from suanli.spec.problems import Problem

        _fail(SpecError([Problem("--out", f"cannot make directory {out}: {exc.strerror or exc}")]), "nothing was simulated")
    with _progress(console) as advance:
        # the event log goes to disk as it grows; write_outputs renames it when complete
        sim = Simulation(world, seed=seed, until=until_s, on_instant=advance, policy=policy.value if policy else None,
                         events_to=out / "events.jsonl.part")
        advance.total = sim.until
        end = sim.run()
    paths = write_outputs(sim, end, out)
    tasks = _counts(sim)
    Console(highlight=False).print(
        f"simulated {world.scenario.metadata.name} to t={end:g}s: {tasks}\n"
        + "\n".join(f"  {name:8} {path}" for name, path in paths.items())
    )


@app.command()
def view(
    folder: Path = typer.Argument(..., help="A folder that `suanli simulate` or `suanli run` wrote (--out)."),
    host: str = typer.Option("127.0.0.1", "--host"),
    port: int = typer.Option(8090, "--port"),
) -> None:
    """Open a recorded run in the console: the same views as the live control plane's, with a time slider."""
    import uvicorn
    from fastapi import FastAPI

    from suanli.console.recorded import RecordedRun, RunFilesError
    from suanli.console.web import add_console
    from suanli.spec.problems import Problem

    try:
        run = RecordedRun(folder)
    except RunFilesError as exc:
        _fail(SpecError([Problem(str(folder), str(exc).split(": ", 1)[-1])]), "nothing to show")
    site = FastAPI(title="suanli console", docs_url=None, redoc_url=None, openapi_url=None)
    add_console(site, lambda who: run, title=f"suanli · {run.scenario}")
    err.print(f"suanli console of {folder} ({len(run.task_names):,} tasks, {run.ev_t.size:,} events) "
              f"on http://{host}:{port}/")
    uvicorn.run(site, host=host, port=port, log_level="warning")


def _runs_what_it_can(world, scenario: Path, executor: str) -> None:
    """A component that runs an image needs the podman executor, and the
    podman executor runs images only: a mismatch is named before anything runs."""
    from suanli.spec.problems import Problem

    for app in world.apps:
        for comp in app.components:
            if comp.run is None:
                continue
            if comp.run.containerized and executor != "podman":
                raise SpecError([Problem("--executor", f"{app.name}/{comp.name} runs an image (run.image"
                                         f"{'s' if comp.run.images else ''}), and the {executor} executor runs "
                                         "processes: run it with --executor podman")])
            if executor == "ray" and (comp.run.readiness or comp.run.liveness):
                raise SpecError([Problem("--executor", f"{app.name}/{comp.name} has health probes, and the ray "
                                         "executor runs none: run it with --executor local or podman")])
            if executor == "podman" and not comp.run.containerized:
                raise SpecError([Problem("--executor", f"{app.name}/{comp.name} runs a command, not an image: "
                                         "the podman executor runs containers (give it run.image, or use "
                                         "--executor local)")])


@app.command("run")
def run_live(
    scenario: Path = typer.Argument(..., help="A file with a Scenario document (its includes are followed)."),
    work_dir: Path = typer.Option(..., "--work-dir", help="Folder for the tasks' logs, state and checkpoints."),
    executor: str = typer.Option("local", "--executor", help="local (processes on this machine), podman "
                                 "(containers on this machine) or ray."),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="The Ray cluster (ray executor; "
                                              "default: RAY_ADDRESS, else the one running on this machine)."),
    out: Optional[Path] = typer.Option(None, "--out", help="Directory for result.json, events.jsonl and "
                                       "report.html (default: WORK_DIR/out)."),
    until: Optional[str] = typer.Option(None, "--until", help="Stop at this time (e.g. 2m); default: the Scenario's until."),
    speed: float = typer.Option(1.0, "--speed", help="Scenario seconds per wall second."),
    confine: bool = typer.Option(True, "--confine/--no-confine", help="Hold local tasks to their slice with "
                                 "control groups where the machine allows."),
    max_pids: int = typer.Option(1024, "--max-pids", help="Processes (and threads) one local task may have at once."),
    max_log: str = typer.Option("64Mi", "--max-log", help="A task's log is rotated past this size (at most twice "
                                "it is kept); at least 1Mi."),
    strict: bool = STRICT,
) -> None:
    """Run a scenario for real: the twin's scheduler on the wall clock, its tasks as real processes."""
    from suanli.engine.clock import WallClock
    from suanli.executors import ExecutorName, make
    from suanli.executors.logs import max_log_bytes
    from suanli.model.quantities import QuantityError
    from suanli.sim.results import write_outputs
    from suanli.sim.simulation import Simulation
    from suanli.spec.problems import Problem

    world, until_s = _scenario_world(scenario, "run", "--until", until, strict=strict)
    try:
        if executor not in ("local", "podman", "ray"):
            raise SpecError([Problem("--executor", f"{executor!r} is not an executor that runs tasks: local, "
                                                   "podman or ray")])
        _runs_what_it_can(world, scenario, executor)
        if not speed > 0:
            raise SpecError([Problem("--speed", "must be above 0")])
        try:
            cap = max_log_bytes(max_log)
        except QuantityError as exc:
            raise SpecError([Problem("--max-log", str(exc))]) from None
        if not 1 <= max_pids <= 1 << 22:
            raise SpecError([Problem("--max-pids", f"must be from 1 to {1 << 22}, got {max_pids}")])
        factory = make(ExecutorName(executor), work_dir=work_dir, ray_address=ray_address, confine=confine,
                       log_max_bytes=cap, max_pids=max_pids)
        out = out or work_dir / "out"
        try:
            out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise SpecError([Problem("--out", f"cannot make directory {out}: {exc.strerror or exc}")]) from None
    except SpecError as exc:
        _fail(exc, "nothing was run")
    import signal

    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stop as on Ctrl-C: end the tasks first
    sim = Simulation(world, until=until_s, clock=WallClock(speed), events_to=out / "events.jsonl.part",
                     executor=factory)
    try:
        end = sim.run()
    except KeyboardInterrupt:
        end = sim.now
        Console(highlight=False, stderr=True).print(f"interrupted at t={end:g}s: stopping the tasks")
    finally:
        sim.executor.close()
    paths = write_outputs(sim, end, out)
    Console(highlight=False).print(
        f"ran {world.scenario.metadata.name} to t={end:g}s on the {executor} executor: {_counts(sim)}\n"
        + "\n".join(f"  {name:8} {path}" for name, path in paths.items())
        + f"\n  logs     {work_dir / 'logs'}"
    )


@app.command()
def plan(
    scenario: Path = typer.Argument(..., help="A file with a Scenario document."),
    at: str = typer.Option(..., "--at", help="The moment to stop at (e.g. 10m)."),
    output: OutputFormat = typer.Option(OutputFormat.table, "-o", "--output", help="table or json"),
    seed: Optional[int] = typer.Option(None, "--seed", help="Random seed (default: the Scenario's)."),
    policy: Optional[PolicyName] = POLICY,
    population: Optional[List[str]] = POPULATION,
    strict: bool = STRICT,
) -> None:
    """Dry run: the state at time --at and the moves the rescheduler would make next."""
    from suanli.model.quantities import format_duration
    from suanli.sim.plan import dry_run
    from suanli.sim.simulation import Simulation
    from suanli.spec.problems import Problem

    world, at_s = _scenario_world(scenario, "plan", "--at", at, population, strict=strict)
    until = world.scenario.spec.until
    if until is not None and at_s > until:
        _fail(SpecError([Problem("--at", f"{at} is past the scenario's end (until: {format_duration(until)}); "
                                          "the run stops there: plan at or before it")]), "nothing was planned")
    sim = Simulation(world, seed=seed, until=at_s, policy=policy.value if policy else None)
    end = sim.run()
    result = dry_run(sim, end)
    if output is OutputFormat.json:
        sys.stdout.write(json.dumps(result, separators=(",", ":")) + "\n")
        return
    console = Console(highlight=False)
    console.print(f"[bold]at t={end:g}s[/bold]: running by site "
                  + ", ".join(f"{s} {n}" for s, n in result["running_by_site"].items())
                  + f"; {len(result['pending'])} pending")
    for r in result["pending"][:MAX_ROWS]:
        console.print(f"waits      {r['task']}: {why_text(r['why'], r['reasons'])}", markup=False)
    if len(result["pending"]) > MAX_ROWS:
        console.print(f"... and {len(result['pending']) - MAX_ROWS} more waiting (-o json lists all)")
    for m in result["moves"]:
        console.print(plan_text(m), markup=False)
    if not result["moves"]:
        console.print("no moves planned")


experiment_app = typer.Typer(no_args_is_help=True, help="Reproducible experiments on public traces.")
app.add_typer(experiment_app, name="experiment")


@experiment_app.command("fgd")
def experiment_fgd(
    nodes: Path = typer.Option(..., "--nodes", help="An openb node list CSV (e.g. openb_node_list_gpu_node.csv)."),
    pods: Path = typer.Option(..., "--pods", help="An openb pod list CSV (any of the openb_pod_list_*.csv)."),
    policy: str = typer.Option("suanli", "--policy", help="Policies, comma-separated: random, dotprod, clustering, "
                               "packing, bestfit, fgd, suanli (default: suanli)."),
    seeds: str = typer.Option("42-51", "--seeds", help="Seeds: 42-51, 42,43 or 7."),
    out: Path = typer.Option(..., "--out", help="Directory for allocation.csv and unallocated.png."),
) -> None:
    """The GPU-sharing experiment of the FGD study (docs/fgd.md): allocation
    against arrived GPU request, per policy and seed."""
    from suanli.experiments.fgd import experiment, parse_seeds, plot, write_csv
    from suanli.scheduling.policies import POLICY_NAMES
    from suanli.sim.traces import TraceError
    from suanli.spec.problems import Problem

    problems = []
    names = [p.strip() for p in policy.split(",") if p.strip()]
    bad = [p for p in names if p not in POLICY_NAMES or p == "default"]
    if bad or not names:
        problems.append(Problem("--policy", f"unknown policy {', '.join(map(repr, bad)) or repr(policy)}; expected "
                                            "random, dotprod, clustering, packing, bestfit, fgd or suanli"))
    try:
        seed_list = parse_seeds(seeds)
    except ValueError:
        problems.append(Problem("--seeds", f"expected seeds like 42-51, 42,43 or 7, got {seeds!r}"))
    for opt, path in (("--nodes", nodes), ("--pods", pods)):
        if not path.is_file():
            problems.append(Problem(opt, f"file {str(path)!r} does not exist"))
    if problems:
        _fail(SpecError(problems), "nothing was run")
    console = Console(highlight=False, stderr=True)
    total = len(names) * len(seed_list)
    done = []

    def on_run(run) -> None:
        done.append(run)
        console.print(f"[{len(done)}/{total}] {run.policy} seed {run.seed}: "
                      f"{100 - run.curve[100]:.2f}% unallocated at 100% arrived, "
                      f"{run.placed:,} of {run.pods:,} pods placed, {run.seconds:.2f}s")
    try:
        workload, runs = experiment(nodes, pods, names, seed_list, on_run)
    except TraceError as exc:
        _fail(SpecError([Problem(str(exc).split(":")[0], str(exc))]), "nothing was run")
    write_csv(out / "allocation.csv", workload, runs)
    plot(out / "unallocated.png", workload, runs)
    from rich.table import Table

    from suanli.experiments.fgd import Summary, study_figures, summarize

    summary = summarize(runs)
    study = {p: Summary(p, [v[s] for s in seed_list]) for p, v in study_figures(workload).items()
             if all(s in v for s in seed_list)}  # only where the study ran these seeds
    table = Table(title=f"{workload}: unallocated GPU % at 100% arrived, {len(seed_list)} seed(s)", title_justify="left")
    for col in ("policy", "mean ± sd", "median", "8-GPU failed", "study"):
        table.add_column(col, justify="left" if col == "policy" else "right")
    if "fgd" in study:
        table.add_column("vs study fgd", justify="right")
    for name, s in sorted(summary.items(), key=lambda kv: kv[1].mean):
        row = [name, f"{s.mean:.2f} ± {s.sd:.2f}", f"{s.median:.2f}", f"{s.failed8:.3f}"]
        ref = study.get(name)
        row.append(f"{ref.mean:.2f} ± {ref.sd:.2f}" if ref else "")
        if "fgd" in study:
            row.append(f"{100 * (s.mean - study['fgd'].mean) / study['fgd'].mean:+.1f}%")
        table.add_row(*row)
    out_console = Console(highlight=False, width=None if sys.stdout.isatty() else 120)
    out_console.print(table)
    out_console.print(f"  allocation {out / 'allocation.csv'}\n  chart      {out / 'unallocated.png'}")


@experiment_app.command("pollux")
def experiment_pollux(
    workload: Path = typer.Option(..., "--workload", help="A Pollux workload CSV (name,time,application,"
                                  "num_replicas,batch_size), e.g. workloads/workload-1.csv."),
    traces: Path = typer.Option(..., "--traces", help="The folder of application profiles (traces/<app>/), or the "
                                "data set's folder that holds it."),
    policy: str = typer.Option("none,goodput", "--policy", help="Elastic policies, comma-separated: none, greedy, "
                               "goodput."),
    load: Optional[float] = typer.Option(None, "--load", help="The workload's relative load, for the artifact's "
                                         "figures beside (default: from its folder, workloads-1.5, else 1.0)."),
    out: Path = typer.Option(..., "--out", help="Directory for result.json, jcts.csv and widths.csv."),
    output: str = typer.Option("table", "-o", "--output", help="table or json."),
) -> None:
    """Pollux's deep-learning workloads (OSDI'21) on its 64-GPU cluster, with
    suanli's elastic policies: JCT, makespan and GPU utilisation per policy,
    beside the artifact's Pollux, Optimus and Tiresias (docs/scheduling.md)."""
    from suanli.experiments.pollux import (POLICIES, WorkloadError, artifact, experiment, hours, load_load, results,
                                           write_outputs)
    from suanli.spec.problems import Problem

    problems = []
    names = [p.strip() for p in policy.split(",") if p.strip()]
    bad = [p for p in names if p not in POLICIES]
    if bad or not names or len(set(names)) != len(names):
        problems.append(Problem("--policy", f"unknown or repeated policy {', '.join(map(repr, bad)) or repr(policy)}; "
                                            f"expected some of {', '.join(POLICIES)}"))
    if output not in ("table", "json"):
        problems.append(Problem("--output", f"expected table or json, got {output!r}"))
    if not workload.is_file():
        problems.append(Problem("--workload", f"file {str(workload)!r} does not exist"))
    if not traces.is_dir():
        problems.append(Problem("--traces", f"folder {str(traces)!r} does not exist"))
    if load is not None and not load > 0:
        problems.append(Problem("--load", f"a relative load is above 0, got {load}"))
    if problems:
        _fail(SpecError(problems), "nothing was run")
    console = Console(highlight=False, stderr=True)

    def on_run(run) -> None:
        s = run.summary()
        console.print(f"{run.policy}: average JCT {hours(s['avg_jct_s'])} h over {s['jobs']} jobs, "
                      f"{s['resizes']} resizes, {run.seconds:.2f}s")
    try:
        name, runs = experiment(workload, traces, names, on_run)
    except (WorkloadError, ValueError) as exc:
        _fail(SpecError([Problem("--workload", str(exc))]), "nothing was run")
    root = traces.parent if traces.name == "traces" else traces
    ref = artifact(root, name, load if load is not None else load_load(workload))
    write_outputs(out, runs, ref)
    result = results(runs, ref)
    if output == "json":
        print(json.dumps(result, indent=2))
        return
    from rich.table import Table

    table = Table(title=f"{name}: {len(runs[0].jct_s)} jobs on 16 nodes x 4 GPUs (hours)", title_justify="left")
    for col in ("policy", "avg JCT", "p50 JCT", "p99 JCT", "makespan", "GPU util", "resizes"):
        table.add_column(col, justify="left" if col == "policy" else "right")
    for pol, s in result.items():
        table.add_row(pol, hours(s["avg_jct_s"]), hours(s["p50_jct_s"]), hours(s["p99_jct_s"]), hours(s["makespan_s"]),
                      f"{100 * s['gpu_utilisation']:.1f}%", str(s["resizes"]))
    for pol, s in ref.items():
        table.add_row(f"{pol} (artifact)", hours(s["avg_jct_s"]), hours(s["p50_jct_s"]), hours(s["p99_jct_s"]),
                      "", "", "")
    out_console = Console(highlight=False, width=None if sys.stdout.isatty() else 120)
    out_console.print(table)
    out_console.print(f"  result  {out / 'result.json'}\n  jobs    {out / 'jcts.csv'}\n  widths  {out / 'widths.csv'}")


def _register_server_commands() -> None:
    from suanli.server.commands import register

    register(app)


_register_server_commands()


def _counts(sim) -> str:
    return ", ".join(f"{n} {k}" for k, n in sim.view.counts().items())


class _progress:
    """A Rich progress bar over simulated time, shown only on a terminal and
    only once a run has taken more than two seconds."""

    def __init__(self, console: Console) -> None:
        self.console, self.total, self._bar, self._task = console, None, None, None

    def __enter__(self) -> "_progress":
        import time

        self._clock = time.monotonic
        self._started = self._clock()
        self._terminal = self.console.is_terminal  # asked once: it is a system call
        return self

    def __call__(self, t: float) -> None:
        if self._bar is None:
            if not self._terminal or self._clock() - self._started < 2.0:
                return
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self._bar = Progress(TextColumn("simulating"), BarColumn(), TextColumn("t={task.completed:.0f}s"),
                                 TimeElapsedColumn(), console=self.console, transient=True)
            self._bar.start()
            self._task = self._bar.add_task("sim", total=self.total)
        self._bar.update(self._task, completed=t)

    def __exit__(self, *exc) -> None:
        if self._bar is not None:
            self._bar.stop()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
