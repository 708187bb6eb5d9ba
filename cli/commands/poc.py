"""`gpuforge poc`: the source articles' proof of concept on a deployed stack (issue 23).

Seed 000 ends on "run a POC on the target GPU, e.g. one ResNet-50 epoch, and record its time and
cost as the baseline for comparing shapes". This runs the profile's workload (or --workload) on
one node of the stack, over the transports validate uses (SSH, this node, or srun through
Slurm), inside the pinned NGC PyTorch container (tag and digest, through the stack's mirror),
with the script gpuforge ships (validate/node_scripts/poc_workloads.py). It prints the measured
figure, what one epoch / 1M inferences / 1e9 paths costs at the stack's purchase option (the
catalog and purchase arithmetic of `gpuforge cost`), and writes the result with its provenance
to --out, where `gpuforge catalog suggest --results DIR` reads it.

A node with no GPU (nvidia-smi lists none) runs on its CPU: the result says "cpu" and is never
ranked. A run that hangs or prints no result is `unknown` with the reason. Exit 0 when the
result is ok, 1 when it is error or unknown, 2 for bad input.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import click

from gpuforge.commands.options import complete_stacks, project_dir_option
from gpuforge.common.errors import InputError
from gpuforge.common.results import atomic_write
from gpuforge.common.table import Column, Rows, emit, format_option
from gpuforge.validate.poc import DEFAULT_ARGS, PROFILE_WORKLOAD, WORKLOADS, Image, NodeFacts, PocResult, judge, node_command

# --quick: a smoke run of the whole path (container, script, result, cost) in seconds, at sizes
# far below the workload's; its figures are labelled quick and never ranked.
QUICK_ARGS: dict[str, tuple[str, ...]] = {
    "resnet50-train": ("--batch-size", "2", "--image-size", "64", "--warmup-steps", "1", "--max-steps", "3",
                       "--max-seconds", "20", "--step-timeout", "60"),
    "bert-infer": ("--batch-sizes", "1,2", "--seq-len", "16", "--warmup-steps", "1", "--max-steps", "3",
                   "--max-seconds", "10", "--step-timeout", "60"),
    "mc-fp64": ("--paths-per-chunk", "16384", "--time-steps", "16", "--warmup-steps", "1", "--max-steps", "5",
                "--max-seconds", "10", "--step-timeout", "60"),
}  # fmt: skip
GPU_PROBE = "nvidia-smi --query-gpu=name --format=csv,noheader"


def _probe_gpus(transport: Any, node: Any) -> tuple[int, str | None, str | None]:
    """(GPU count, GPU name, why 0) as nvidia-smi on the node lists them."""
    res = transport.run(node, GPU_PROBE, 30.0)
    names = [ln.strip() for ln in res.stdout.splitlines() if ln.strip()] if res.ok else []
    if not names:
        why = res.detail or (res.stderr.strip().splitlines() or [f"exit {res.exit_code}"])[-1]
        return 0, None, f"nvidia-smi lists no GPU on the node ({why})"
    return len(names), names[0], None


def _gpu_share(cfg: Any) -> str | None:
    sharing = cfg.profile.sharing
    if sharing.mode in ("time-slicing", "mps") and sharing.replicas > 1:
        return f"{sharing.mode}, {sharing.replicas} replicas per GPU"
    return None


@click.command("poc")
@click.option("--stack", "-s", "stack", required=True, shell_complete=complete_stacks, help="The deployed stack.")
@click.option("--workload", type=click.Choice(WORKLOADS), default=None,
              help="Default: the profile's (cv-training: resnet50-train, nlp-inference: bert-infer, risk-sim: mc-fp64).")
@click.option("--inventory", "inventory_path", default=None, help="The stack's inventory (YAML/JSON), or - for stdin.")
@click.option("--discover", is_flag=True, help="Find the stack's running instances in EC2 by tag instead.")
@click.option("--region", default=None, help="AWS region for --discover.")
@click.option("--node", "node_name", default=None, help="The node to run on (default: the inventory's first).")
@click.option("--ssh-user", default=None)
@click.option("--ssh-key", default=None)
@click.option("--known-hosts", default=None)
@click.option("--accept-new-host-keys", is_flag=True, help="Trust unknown host keys, add them to known_hosts.")
@click.option("--transport", "transport_kind", type=click.Choice(["ssh", "local", "slurm"]), default="ssh", show_default=True)
@click.option("--slurm-partition", default=None)
@click.option("--timeout", "timeout_s", type=click.FloatRange(10, 7200), default=900.0, show_default=True,
              help="Bound on the whole run on the node (pull, warm-up, measurement).")
@click.option("--kubeconfig", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="EKS stacks: run the workload as a Kubernetes Job with one GPU share, through this kubeconfig.")
@click.option("--namespace", default=None, help="Namespace of the Job (default: the device plugin's).")
@click.option("--quick", is_flag=True, help="A smoke run at tiny sizes: proves the path; never ranked.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Where the result JSON goes (default: ./gpuforge-poc/<UTC time>).")
@format_option
@project_dir_option
def command(stack: str, workload: str | None, inventory_path: str | None, discover: bool, region: str | None,
            node_name: str | None, ssh_user: str | None, ssh_key: str | None, known_hosts: str | None,
            accept_new_host_keys: bool, transport_kind: str, slurm_partition: str | None, timeout_s: float,
            kubeconfig: Path | None, namespace: str | None, quick: bool, out: Path | None, fmt: str,
            project_dir: Path) -> None:
    """Run the stack's proof-of-concept workload on one node and cost it.

    \b
    Examples:
      gpuforge poc --stack cv-training --inventory inv.json --ssh-key ~/.ssh/id_ed25519
      gpuforge poc --stack risk-sim --discover --workload mc-fp64 --out results/
      gpuforge catalog suggest --profile cv-training --results results/
    """
    from gpuforge.bootstrap.versions import load_versions
    from gpuforge.commands.validate import _load, _transport
    from gpuforge.core.config import parse_stack_config
    from gpuforge.core.costplan import stack_cost
    from gpuforge.core.poccost import cost_line, throughput_from_result, workload_cost
    from gpuforge.stackfile import load_stack_config, stack_name
    from gpuforge.validate.transport import Timeouts

    project_dir = project_dir.resolve()
    name = stack_name(project_dir, stack)
    raw, _ = load_stack_config(project_dir, name)
    cfg = parse_stack_config(raw, name)
    workload = workload or PROFILE_WORKLOAD.get(cfg.profile.name)
    if workload is None:
        raise InputError(f"--workload: profile {cfg.profile.name!r} has no default POC workload",
                         f"pass --workload ({', '.join(WORKLOADS)})")
    pin = load_versions().poc_image
    image = Image(pin.image, pin.digest, pin.source)
    out = out or Path("gpuforge-poc") / datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    extra = QUICK_ARGS[workload] if quick else DEFAULT_ARGS[workload]
    mirror = cfg.mirror.get("nvcr.io")
    if kubeconfig is not None:
        from gpuforge.core.kubernetes.settings import GPU_NODE_LABEL, defaults
        from gpuforge.validate.pocjob import run_job

        transport_kind, gpu_name, no_gpu = "kubernetes-job", None, None
        gpus = 1  # one GPU share, as a pod of the stack gets it
        facts = NodeFacts(cfg.instance.name, 1, cfg.node_count, _gpu_share(cfg))
        ns = namespace or str(defaults()["device_plugin"]["namespace"])
        result = judge(run_job(str(kubeconfig), ns, workload, image, facts, mirror_location=mirror, extra=extra,
                               timeout_s=timeout_s, node_selector={GPU_NODE_LABEL: "true"}), workload)
        node_label = result.node
    else:
        if inventory_path is None and not discover:
            raise InputError("pass --inventory FILE (the stack's `pulumi stack output --json inventory`), --discover, "
                             "or --kubeconfig for an EKS stack",
                             f"e.g. pulumi stack output --json inventory --stack {name} > inv.json")
        inv = _load(inventory_path, name if discover else None, region,
                    {"user": ssh_user, "key_file": ssh_key, "known_hosts": known_hosts})
        try:
            node = inv.node(node_name) if node_name else inv.nodes[0]
        except KeyError:
            raise InputError(f"--node: {node_name!r} is not in the inventory",
                             f"use one of {', '.join(n.name for n in inv.nodes)}") from None
        transport = _transport(transport_kind, inv.model_copy(update={"nodes": [node]}), accept_new_host_keys,
                               Timeouts(), slurm_partition)
        try:
            gpus, gpu_name, no_gpu = _probe_gpus(transport, node)
            facts = NodeFacts(node.instance_type or cfg.instance.name, gpus, cfg.node_count, _gpu_share(cfg))
            cmd = node_command(workload, image, facts, mirror_location=mirror, extra=extra)
            result = judge(transport.run(node, cmd, timeout_s), workload)
        finally:
            transport.close()
        node_label = node.name
    notes = [no_gpu] if no_gpu else []
    fp64: dict[str, Any] | None = None
    cost: dict[str, Any] | None = None
    line = None
    if result.status == "ok":
        wc = workload_cost(throughput_from_result(result.doc), stack_cost(cfg), cfg.fleet.purchase_option)
        cost, line = wc.to_dict(), cost_line(wc)
        if result.is_cpu:
            notes.append("CPU run: the cost is what this run's speed would cost on the stack; it says nothing "
                         "about the stack's GPUs and is never ranked")
        notes.append(wc.scaling)
        if workload == "mc-fp64":
            from gpuforge.core.catalog import load_catalog
            from gpuforge.core.poccost import fp64_ratio

            catalog = load_catalog()
            itype = facts.instance_type or cfg.instance.name
            peak = fp64_ratio(result.doc, catalog.gpu(catalog.instance_types[itype]) if itype in catalog.instance_types else None)
            fp64 = peak
            notes.append(f"FP64: {peak['counted_gflops']:g} counted GFLOP/s per GPU" + (
                f" = {peak['ratio']:.2%} of the {peak['peak_tflops']:g} TFLOPS peak ({peak['why']})" if peak["ratio"] is not None
                else f"; no ratio: {peak['why']}"))
    doc = result.to_dict() | {
        "run": {"stack": name, "profile": cfg.profile.name, "transport": transport_kind, "quick": quick,
                "gpus_seen": gpus, "gpu_name_seen": gpu_name, "image": image.pull_ref(mirror),
                "timeout_s": timeout_s},
        "cost": cost,
        "fp64_peak": fp64,
        "label": _label(result, quick),
    }
    out.mkdir(parents=True, exist_ok=True)
    path = out / f"{name}-{node_label}-{workload}.json"
    atomic_write(path, json.dumps(doc, indent=2, sort_keys=True) + "\n")
    if fmt == "json":
        click.echo(json.dumps(doc | {"notes": doc.get("notes", []) + notes, "file": str(path)}, indent=2, sort_keys=True))
    else:
        _print(result, doc, line, notes, path, fmt)
    if result.status != "ok":
        raise SystemExit(1)


def _label(result: PocResult, quick: bool) -> str:
    """measured | measured-cpu | quick: how catalog suggest treats the figure (only `measured` ranks)."""
    if result.is_cpu:
        return "measured-cpu"
    return "quick" if quick else "measured"


_FIGURES = {
    "resnet50-train": (("images/s", "images_per_s"), ("epoch s, this node", "epoch_seconds")),
    "bert-infer": (("best QPS", "best_qps"), ("at batch", "best_batch_size")),
    "mc-fp64": (("paths/s", "paths_per_s"), ("s per 1e9 paths, one GPU", "seconds_per_1e9_paths")),
}


def _print(result: PocResult, doc: dict[str, Any], line: str | None, notes: list[str], path: Path, fmt: str) -> None:
    (h1, k1), (h2, k2) = _FIGURES[result.workload]
    rows = Rows(f"poc {result.workload} on {result.node} ({doc['label']})",
                [Column("node"), Column("workload"), Column("status"), Column("device"),
                 Column(h1, justify="right"), Column(h2, justify="right"), Column("cost at stack option", justify="right")])
    dev = result.provenance.get("device") or {}
    cost = doc.get("cost") or {}
    at = cost.get("usd_at_purchase_option")
    rows.add(result.node, result.workload, result.status, str(dev.get("name") or "-"),
             _cell(result.result.get(k1)), _cell(result.result.get(k2)),
             "-" if at is None else f"${at:,.4f} per {cost.get('unit')}")
    emit(rows, fmt)
    prefix = "# " if fmt == "plain" else ""
    if result.reason:
        click.echo(f"{prefix}reason: {result.reason}")
    if line:
        click.echo(f"{prefix}{line}")
    prov = result.provenance
    if prov:
        click.echo(f"{prefix}provenance: {prov.get('instance_type')}, {dev.get('name')}, driver {dev.get('driver') or '-'}, "
                   f"image {prov.get('image')}@{prov.get('image_digest')}, {prov.get('node_count')} node(s), "
                   f"{prov.get('date')}, torch {prov.get('torch')}")
        click.echo(f"{prefix}command: {prov.get('command')}")
    for note in notes:
        click.echo(f"{prefix}note: {note}")
    click.echo(f"{prefix}result: {path}")


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:,.2f}" if isinstance(value, float) else str(value)
