"""The proof-of-concept run on a node (issue 23): the command the transport runs, and its result.

`node_command` is what one node runs: the shipped workload script (node_scripts/poc_workloads.py)
written to a private temporary folder through a heredoc (so no copy step can be skipped or go
stale, as validate's compute probe does it), then run inside the pinned NGC container, by tag
AND digest, pulled from the stack's mirror when one is configured. `parse_result` reads the one
JSON line the script prints. A run that printed no result, or was cut off by the transport's
bound, is `unknown` with the reason, never a figure. validate never imports pulumi: this module
reads no stack; the CLI passes the image, the mirror's location and the node's facts in.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuforge.validate.checks import ParseError
from gpuforge.validate.transport import CommandResult, Outcome

SCRIPT = Path(__file__).resolve().parent / "node_scripts" / "poc_workloads.py"
TOOL, SCHEMA = "gpuforge-poc", 1
_HEREDOC = "GPUFORGE_POC_EOF"
IN_CONTAINER = "/gpuforge"  # where the script's folder is mounted, read-only

WORKLOADS = ("resnet50-train", "bert-infer", "mc-fp64")
# The workload each reference profile was chosen for (seed 000 section 4; DESIGN.md).
PROFILE_WORKLOAD = {"cv-training": "resnet50-train", "nlp-inference": "bert-infer", "risk-sim": "mc-fp64"}
# What the script measures with, per workload, at full size on a GPU. Tests pass tiny sizes.
DEFAULT_ARGS: dict[str, tuple[str, ...]] = {
    "resnet50-train": ("--batch-size", "64", "--warmup-steps", "20", "--max-steps", "400", "--max-seconds", "30"),
    "bert-infer": ("--batch-sizes", "1,8,32,128", "--seq-len", "128", "--warmup-steps", "10", "--max-steps", "300",
                   "--max-seconds", "10"),
    "mc-fp64": ("--paths-per-chunk", "4194304", "--time-steps", "64", "--warmup-steps", "3", "--max-steps", "100",
                "--max-seconds", "20"),
}  # fmt: skip


@dataclass(frozen=True)
class Image:
    """A pinned container image: `name:tag` and its `sha256:` digest (bootstrap/versions.yaml)."""

    ref: str  # nvcr.io/nvidia/pytorch:24.08-py3
    digest: str  # sha256:...
    source: str = ""

    def pull_ref(self, mirror_location: str | None = None) -> str:
        """What docker is asked for: tag and digest, on the mirror when one serves the registry
        (`nvcr.io=registry.internal/nvcr` -> registry.internal/nvcr/nvidia/pytorch:24.08-py3@sha256:...).
        The digest pins the content wherever it is pulled from: a mirror serving anything else fails."""
        _, _, rest = self.ref.partition("/")
        where = f"{mirror_location.rstrip('/')}/{rest}" if mirror_location else self.ref
        return f"{where}@{self.digest}"


@dataclass(frozen=True)
class NodeFacts:
    """What the runner knows about the node (inventory, stack) and passes into the result."""

    instance_type: str | None
    gpus: int  # the node's GPU count from the catalog; 0: run on the CPU (a labelled CPU run)
    node_count: int = 1
    gpu_share: str | None = None  # e.g. "time-sliced, 4 replicas per GPU" on shared inference stacks


def container_command(workload: str, facts: NodeFacts, extra: tuple[str, ...] = ()) -> list[str]:
    """The command inside the container: torchrun over the node's GPUs for training, python else."""
    script = f"{IN_CONTAINER}/{SCRIPT.name}"
    args = [workload, *(extra or DEFAULT_ARGS[workload])]
    if workload == "resnet50-train" and facts.gpus > 1:
        return ["torchrun", "--standalone", f"--nproc_per_node={facts.gpus}", script, *args]
    return ["python", script, *args]


def provenance_env(image: Image, facts: NodeFacts, inner: list[str]) -> dict[str, str]:
    """What the workload script records as its provenance: the same variables on a node (docker
    -e) and in a Kubernetes Job's container."""
    return {
        "GPUFORGE_POC_INSTANCE_TYPE": facts.instance_type or "",
        "GPUFORGE_POC_IMAGE": image.ref,
        "GPUFORGE_POC_IMAGE_DIGEST": image.digest,
        "GPUFORGE_POC_NODES": str(facts.node_count),
        "GPUFORGE_POC_GPU_SHARE": facts.gpu_share or "",
        "GPUFORGE_POC_COMMAND": " ".join(shlex.quote(a) for a in inner),
    }


def node_command(workload: str, image: Image, facts: NodeFacts, *, mirror_location: str | None = None,
                 extra: tuple[str, ...] = (), runtime: str = "docker") -> str:
    """The shell command one node runs: script to a private folder, then the pinned container."""
    if workload not in WORKLOADS:
        raise ValueError(f"unknown workload {workload!r}")
    ref = image.pull_ref(mirror_location)
    inner = container_command(workload, facts, extra)
    env = provenance_env(image, facts, inner)
    run = [runtime, "run", "--rm", "--pull", "missing", "--network", "none", "--ipc", "host",
           *(["--gpus", "all"] if facts.gpus > 0 else []),
           "-v", f'"$d":{IN_CONTAINER}:ro',
           *[x for k, v in env.items() for x in ("-e", shlex.quote(f"{k}={v}"))],
           shlex.quote(ref), *(shlex.quote(a) for a in inner)]  # fmt: skip
    # `$d` stays unquoted-expanded by the node's shell inside double quotes; everything else is quoted.
    return (
        'd=$(mktemp -d) || exit 1; trap \'rm -rf "$d"\' EXIT; chmod 755 "$d"\n'
        f"cat >\"$d/{SCRIPT.name}\" <<'{_HEREDOC}'\n{SCRIPT.read_text()}{_HEREDOC}\n"
        + " ".join(run)
        + "\n"
    )


@dataclass(frozen=True)
class PocResult:
    """One node's result: the script's document plus how the run went on the transport."""

    node: str
    workload: str
    status: str  # ok | error | unknown
    reason: str | None
    doc: dict[str, Any] = field(default_factory=dict)

    @property
    def device_kind(self) -> str:
        return str(((self.doc.get("provenance") or {}).get("device") or {}).get("kind") or "unknown")

    @property
    def is_cpu(self) -> bool:
        return self.device_kind == "cpu"

    @property
    def result(self) -> dict[str, Any]:
        return dict(self.doc.get("result") or {})

    @property
    def provenance(self) -> dict[str, Any]:
        return dict(self.doc.get("provenance") or {})

    def to_dict(self) -> dict[str, Any]:
        return {**self.doc, "node": self.node, "workload": self.workload, "status": self.status, "reason": self.reason}


def parse_result(stdout: str) -> dict[str, Any]:
    """The script's JSON document (its last non-empty stdout line); ParseError if it is not one."""
    lines = [ln for ln in stdout.splitlines() if ln.strip()]
    if not lines:
        raise ParseError("the workload printed nothing")
    try:
        doc = json.loads(lines[-1])
    except json.JSONDecodeError as exc:
        raise ParseError(f"the workload's last line is not JSON: {exc.msg}") from None
    if not isinstance(doc, dict) or doc.get("tool") != TOOL or doc.get("schema") != SCHEMA:
        raise ParseError(f"not {TOOL} schema {SCHEMA} output")
    if doc.get("status") not in ("ok", "error", "unknown"):
        raise ParseError(f"status {doc.get('status')!r} is not ok, error or unknown")
    if doc["status"] == "ok":
        _check_figures(doc)
    return doc


_FIGURE = {"resnet50-train": "images_per_s", "bert-infer": "best_qps", "mc-fp64": "paths_per_s"}


def _check_figures(doc: dict[str, Any]) -> None:
    key = _FIGURE.get(str(doc.get("workload")))
    value = (doc.get("result") or {}).get(key) if key else None
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not value > 0:
        raise ParseError(f"an ok result without a positive {key}: {value!r}")
    if not isinstance(doc.get("provenance"), dict):
        raise ParseError("an ok result without provenance")


def judge(res: CommandResult, workload: str) -> PocResult:
    """A transport result -> PocResult. Only a parsed document from the script carries figures."""
    if res.outcome is not Outcome.OK:
        why = res.detail or res.outcome.value
        if res.outcome is Outcome.TIMEOUT:
            why = f"the run ended at its bound: {why}"
        return PocResult(res.node, workload, "unknown", why)
    try:
        doc = parse_result(res.stdout)
    except ParseError as exc:
        tail = " | ".join(ln.strip() for ln in res.stderr.strip().splitlines()[-2:])
        return PocResult(res.node, workload, "unknown", f"{exc} (exit {res.exit_code}{'; ' + tail if tail else ''})")
    if doc.get("workload") != workload:
        return PocResult(res.node, workload, "unknown", f"the script reported workload {doc.get('workload')!r}")
    return PocResult(res.node, workload, str(doc["status"]), doc.get("reason"), doc)


def load_results(folder: Path) -> list[dict[str, Any]]:
    """Every result document under `folder` (*.json written by `gpuforge poc --out`, or a script's
    own output); files that are not gpuforge-poc results are skipped, a broken one is an error."""
    from gpuforge.common.inputfile import POC_RESULT, read_text

    docs = []
    for path in sorted(folder.rglob("*.json")):
        text = read_text(path, POC_RESULT, "--results")  # bounded, UTF-8, readable: the one reader's rules
        try:
            doc = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ParseError(f"{path}: not a JSON document: {exc}") from None
        if isinstance(doc, dict) and doc.get("tool") == TOOL:
            parse_result(json.dumps(doc))  # the same checks as a fresh run's output
            docs.append(doc | {"_file": str(path)})
    return docs
