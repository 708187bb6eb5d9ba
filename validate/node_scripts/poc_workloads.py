#!/usr/bin/env python3
"""gpuforge proof-of-concept workloads (issue 23): the source articles' POC advice as programs.

    python3 poc_workloads.py resnet50-train [--batch-size 64] ...     (under torchrun for all GPUs)
    python3 poc_workloads.py bert-infer [--batch-sizes 1,8,32,128] ...
    python3 poc_workloads.py mc-fp64 [--paths-per-chunk N] ...

Each prints ONE JSON object on its last stdout line (`"tool": "gpuforge-poc"`), carrying its
provenance (GPU, driver, framework, host, date, the exact command; the runner adds the instance
type, container image and digest through GPUFORGE_POC_* variables). Every phase is bounded: a
warm-up step count, a measured window capped in steps AND seconds, and a watchdog that ends a
step that hangs with `"status": "unknown"` and the reason, never a figure.

Self-contained on purpose (stdlib + torch): the transport ships this one file into the pinned
NGC container, and the tests run the same file on CPU with a real (CPU) torch at tiny sizes.
The models are built here from their published shapes, never downloaded: ResNet-50 v1.5 as
torchvision builds it (He et al. 2015 with the stride on the 3x3 convolution, NVIDIA
DeepLearningExamples' "v1.5"), BERT-base as Devlin et al. 2018 configure it (12 layers, hidden
768, 12 heads, FFN 3072, vocabulary 30522, post-norm, GELU). AMP follows NVIDIA's PyTorch
examples: autocast float16 plus a GradScaler, on GPUs with tensor cores (compute capability 7.0+).
"""

import argparse
import importlib
import json
import math
import os
import shlex
import socket
import subprocess
import sys
import threading
import time
from typing import Any

TOOL = "gpuforge-poc"
SCHEMA = 1
IMAGENET_TRAIN_IMAGES = 1_281_167  # ILSVRC-2012 training set (the seeds' "one ResNet-50 epoch")
EXIT_UNKNOWN = 3


# ----------------------------------------------------------------------------- bounds


class Watchdog:
    """Ends the process with an `unknown` result when one phase overruns its bound.

    A hung CUDA call or collective never returns to Python, so the bound is a timer thread that
    prints the verdict itself and exits the process (os._exit: the hung thread cannot be joined).
    """

    def __init__(self, doc):
        self.doc = doc
        self.timer = None
        self.lock = threading.Lock()

    def arm(self, what, seconds):
        self.disarm()
        self.timer = threading.Timer(seconds, self._fire, args=(what, seconds))
        self.timer.daemon = True
        self.timer.start()

    def disarm(self):
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None

    def _fire(self, what, seconds):
        with self.lock:
            self.doc["status"] = "unknown"
            self.doc["reason"] = f"{what} did not finish within {seconds:g} s (hung?)"
            emit(self.doc)
            sys.stdout.flush()
            os._exit(EXIT_UNKNOWN)


def emit(doc):
    if int(os.environ.get("RANK", "0")) == 0:
        print(json.dumps(doc, sort_keys=True), flush=True)


# ----------------------------------------------------------------------------- provenance


def _smi(query):
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20, check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    lines = [ln.strip() for ln in out.stdout.splitlines() if ln.strip()]
    return lines[0] if out.returncode == 0 and lines else None


def provenance(torch, args):
    env = os.environ
    cuda = torch.cuda.is_available() and args.device != "cpu"
    device: dict[str, Any] = {"kind": "cuda" if cuda else "cpu"}
    if cuda:
        idx = int(env.get("LOCAL_RANK", "0"))
        torch.cuda.set_device(idx)
        props = torch.cuda.get_device_properties(idx)
        device.update(
            name=props.name,
            count=torch.cuda.device_count(),
            capability=f"{props.major}.{props.minor}",
            memory_bytes=int(props.total_memory),
            driver=_smi("driver_version"),
        )
    else:
        device.update(name=f"CPU ({os.cpu_count()} logical)", count=0, capability=None, memory_bytes=None, driver=None)
    return {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": socket.gethostname(),
        "command": env.get("GPUFORGE_POC_COMMAND") or " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]),
        "instance_type": env.get("GPUFORGE_POC_INSTANCE_TYPE"),
        "image": env.get("GPUFORGE_POC_IMAGE"),
        "image_digest": env.get("GPUFORGE_POC_IMAGE_DIGEST"),
        "node_count": int(env.get("GPUFORGE_POC_NODES", "1")),
        "world_size": int(env.get("WORLD_SIZE", "1")),
        "gpu_share": env.get("GPUFORGE_POC_GPU_SHARE"),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "device": device,
    }


def _sync(torch, device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _device(torch, args):
    if args.device == "cpu" or not torch.cuda.is_available():
        if args.device == "cuda":
            raise RuntimeError("--device cuda: torch.cuda.is_available() is False")
        return torch.device("cpu")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    torch.cuda.set_device(local)
    return torch.device("cuda", local)


def _amp(torch, args, device):
    if args.amp == "off" or device.type != "cuda":
        return False
    major, _ = torch.cuda.get_device_capability(device)
    return args.amp == "on" or major >= 7  # tensor cores: Volta (7.0) and later


def _measured_window(torch, device, dog, args, step):
    """Warm-up steps, then steps until max_steps or max_seconds; returns (steps, seconds)."""
    for i in range(args.warmup_steps):
        dog.arm(f"warm-up step {i + 1}", args.step_timeout)
        step()
        _sync(torch, device)
    dog.disarm()
    steps, start = 0, time.perf_counter()
    while steps < args.max_steps and (steps < args.min_steps or time.perf_counter() - start < args.max_seconds):
        dog.arm(f"measured step {steps + 1}", args.step_timeout)
        step()
        _sync(torch, device)
        steps += 1
    dog.disarm()
    return steps, time.perf_counter() - start


# ----------------------------------------------------------------------------- ResNet-50


def resnet50(torch, num_classes=1000):
    """ResNet-50 v1.5 (torchvision.models.resnet50's layout: 25,557,032 parameters)."""
    nn = torch.nn

    class Bottleneck(torch.nn.Module):  # type: ignore[name-defined]  # torch is a parameter
        expansion = 4

        def __init__(self, inplanes, planes, stride=1, downsample=None):
            super().__init__()
            self.conv1 = nn.Conv2d(inplanes, planes, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(planes)
            self.conv2 = nn.Conv2d(planes, planes, 3, stride=stride, padding=1, bias=False)  # v1.5: stride here
            self.bn2 = nn.BatchNorm2d(planes)
            self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(planes * 4)
            self.relu = nn.ReLU(inplace=True)
            self.downsample = downsample

        def forward(self, x):
            idt = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            return self.relu(out + idt)

    class ResNet(torch.nn.Module):  # type: ignore[name-defined]  # torch is a parameter
        def __init__(self):
            super().__init__()
            self.inplanes = 64
            self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(64)
            self.relu = nn.ReLU(inplace=True)
            self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
            self.layer1 = self._layer(64, 3)
            self.layer2 = self._layer(128, 4, 2)
            self.layer3 = self._layer(256, 6, 2)
            self.layer4 = self._layer(512, 3, 2)
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc = nn.Linear(2048, num_classes)
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

        def _layer(self, planes, blocks, stride=1):
            down = None
            if stride != 1 or self.inplanes != planes * 4:
                down = nn.Sequential(nn.Conv2d(self.inplanes, planes * 4, 1, stride=stride, bias=False),
                                     nn.BatchNorm2d(planes * 4))
            layers = [Bottleneck(self.inplanes, planes, stride, down)]
            self.inplanes = planes * 4
            layers += [Bottleneck(self.inplanes, planes) for _ in range(1, blocks)]
            return nn.Sequential(*layers)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
            return self.fc(torch.flatten(self.avgpool(x), 1))

    return ResNet()


def run_resnet50(torch, args, doc, dog):
    device = _device(torch, args)
    world = int(os.environ.get("WORLD_SIZE", "1"))
    dist: Any = None
    if world > 1:
        dist = importlib.import_module("torch.distributed")
        dog.arm("process group init", args.setup_timeout)
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
        dog.disarm()
    amp = _amp(torch, args, device)
    doc["config"] = {"batch_size_per_gpu": args.batch_size, "image_size": args.image_size, "amp": amp,
                     "warmup_steps": args.warmup_steps, "max_steps": args.max_steps, "max_seconds": args.max_seconds,
                     "data": "synthetic ImageNet-shaped tensors on the device (no input pipeline)",
                     "model": "ResNet-50 v1.5", "optimizer": "SGD momentum 0.875, lr 0.256 per 256 images"}
    torch.manual_seed(1234 + int(os.environ.get("RANK", "0")))
    model = resnet50(torch).to(device)
    doc["config"]["parameters"] = sum(p.numel() for p in model.parameters())
    if device.type == "cuda":
        model = model.to(memory_format=torch.channels_last)
        torch.backends.cudnn.benchmark = True
    if dist is not None:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    opt = torch.optim.SGD(model.parameters(), lr=0.256 * args.batch_size * world / 256, momentum=0.875, weight_decay=1 / 32768)
    loss_fn = torch.nn.CrossEntropyLoss(label_smoothing=0.1)
    scaler = torch.amp.GradScaler("cuda", enabled=amp)
    fmt = torch.channels_last if device.type == "cuda" else torch.contiguous_format
    images = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device).to(memory_format=fmt)
    labels = torch.randint(0, 1000, (args.batch_size,), device=device)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device.type, dtype=torch.float16, enabled=amp):
            loss = loss_fn(model(images), labels)
        scaler.scale(loss).backward()
        scaler.step(opt)
        scaler.update()

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    steps, seconds = _measured_window(torch, device, dog, args, step)
    per_rank = args.batch_size * steps / seconds
    total = per_rank
    if dist is not None:
        t = torch.tensor([per_rank], dtype=torch.float64, device=device)
        dog.arm("all-reduce of the throughput", args.step_timeout)
        dist.all_reduce(t)
        dog.disarm()
        total = float(t.item())
    result = {
        "images_per_s": round(total, 3),
        "images_per_s_per_rank": round(total / world, 3),
        "ranks": world,  # torchrun: one rank per GPU (on a CPU run, per process)
        "measured_steps": steps,
        "measured_seconds": round(seconds, 4),
        "epoch_images": IMAGENET_TRAIN_IMAGES,
        "epoch_seconds": round(IMAGENET_TRAIN_IMAGES / total, 2),
    }
    if device.type == "cuda":
        free, total_mem = torch.cuda.mem_get_info(device)
        peak = torch.cuda.max_memory_reserved(device)
        result["memory"] = {
            "batch_size": args.batch_size,
            "peak_allocated_bytes": int(torch.cuda.max_memory_allocated(device)),
            "peak_reserved_bytes": int(peak),
            "mem_get_info_free_bytes": int(free),
            "mem_get_info_total_bytes": int(total_mem),
            "peak_fraction_of_total": round(peak / total_mem, 4),
        }
    else:
        result["memory"] = None
        doc["notes"].append("CPU run: no device memory to check against mem_get_info")
    doc["result"] = result
    if dist is not None:
        dist.destroy_process_group()


# ----------------------------------------------------------------------------- BERT-base


BERT_BASE = {"vocab": 30522, "hidden": 768, "layers": 12, "heads": 12, "ffn": 3072, "max_positions": 512, "type_vocab": 2}


def bert(torch, cfg):
    """BERT-base encoder and pooler (Devlin et al. 2018): 109,482,240 parameters, as HF BertModel."""
    nn = torch.nn

    class Bert(torch.nn.Module):  # type: ignore[name-defined]  # torch is a parameter
        def __init__(self):
            super().__init__()
            h = cfg["hidden"]
            self.word = nn.Embedding(cfg["vocab"], h)
            self.position = nn.Embedding(cfg["max_positions"], h)
            self.token_type = nn.Embedding(cfg["type_vocab"], h)
            self.norm = nn.LayerNorm(h, eps=1e-12)
            layer = nn.TransformerEncoderLayer(h, cfg["heads"], cfg["ffn"], dropout=0.0, activation="gelu",
                                               layer_norm_eps=1e-12, batch_first=True, norm_first=False)
            self.encoder = nn.TransformerEncoder(layer, cfg["layers"], enable_nested_tensor=False)
            self.pooler = nn.Linear(h, h)

        def forward(self, ids, types):
            pos = torch.arange(ids.shape[1], device=ids.device).unsqueeze(0)
            x = self.norm(self.word(ids) + self.position(pos) + self.token_type(types))
            x = self.encoder(x)
            return x, torch.tanh(self.pooler(x[:, 0]))

    return Bert()


def _percentile(sorted_values, q):
    """Nearest-rank percentile (what latency reports such as TensorRT's demoBERT print)."""
    k = max(0, min(len(sorted_values) - 1, math.ceil(q / 100 * len(sorted_values)) - 1))
    return sorted_values[k]


def run_bert(torch, args, doc, dog):
    device = _device(torch, args)
    half = _amp(torch, args, device)
    batches = [int(b) for b in args.batch_sizes.split(",") if b.strip()]
    doc["config"] = {"model": "BERT-base (12 layers, hidden 768)", "sequence_length": args.seq_len,
                     "batch_sizes": batches, "precision": "fp16" if half else "fp32",
                     "warmup_steps": args.warmup_steps, "max_steps": args.max_steps, "max_seconds": args.max_seconds,
                     "inputs": "random token ids (no tokenizer, no checkpoint)"}
    torch.manual_seed(1234)
    model = bert(torch, BERT_BASE).to(device).eval()
    doc["config"]["parameters"] = sum(p.numel() for p in model.parameters())
    if half:
        model = model.half()
    rows = []
    for bs in batches:
        ids = torch.randint(0, BERT_BASE["vocab"], (bs, args.seq_len), device=device)
        types = torch.zeros_like(ids)
        latencies: list[float] = []

        def step(ids=ids, types=types, latencies=latencies):
            t0 = time.perf_counter()
            with torch.inference_mode():
                model(ids, types)
            _sync(torch, device)
            latencies.append(time.perf_counter() - t0)

        steps, _ = _measured_window(torch, device, dog, args, step)
        measured = sorted(latencies[-steps:])
        mean = sum(measured) / len(measured)
        rows.append({"batch_size": bs, "steps": steps, "qps": round(bs / mean, 3),
                     "latency_ms": {"mean": round(mean * 1e3, 3), "p50": round(_percentile(measured, 50) * 1e3, 3),
                                    "p99": round(_percentile(measured, 99) * 1e3, 3)}})
    best = max(rows, key=lambda r: r["qps"])
    doc["result"] = {"per_batch": rows, "best_qps": best["qps"], "best_batch_size": best["batch_size"],
                     "scope": "one GPU (or GPU share) as this process sees it"}


# ----------------------------------------------------------------------------- FP64 Monte Carlo

# Counted float64 operations per path: per time step one FMA for the log-price increment (2) and
# its accumulation (1); at expiry exp, subtract, max, multiply (4). The normal draws are not
# counted. A Monte Carlo kernel is bound by random-number generation and memory, so its ratio to
# the FP64 peak is a few percent at best: it says how much of the peak this workload uses.
FLOPS_PER_STEP = 3
FLOPS_PER_PATH = 4


def black_scholes_call(s0, k, r, sigma, t):
    d1 = (math.log(s0 / k) + (r + sigma**2 / 2) * t) / (sigma * math.sqrt(t))
    d2 = d1 - sigma * math.sqrt(t)
    cdf = lambda x: 0.5 * (1 + math.erf(x / math.sqrt(2)))  # noqa: E731
    return s0 * cdf(d1) - k * math.exp(-r * t) * cdf(d2)


def run_mc(torch, args, doc, dog):
    device = _device(torch, args)
    s0, k, r, sigma, t, n_steps = 100.0, 105.0, 0.03, 0.2, 1.0, args.time_steps
    doc["config"] = {"option": "European call, geometric Brownian motion", "s0": s0, "strike": k, "rate": r,
                     "sigma": sigma, "years": t, "time_steps": n_steps, "paths_per_chunk": args.paths_per_chunk,
                     "dtype": "float64", "warmup_steps": args.warmup_steps, "max_steps": args.max_steps,
                     "max_seconds": args.max_seconds,
                     "counted_flops_per_path": FLOPS_PER_STEP * n_steps + FLOPS_PER_PATH}
    dt = t / n_steps
    drift, vol = (r - sigma**2 / 2) * dt, sigma * math.sqrt(dt)
    gen = torch.Generator(device=device)
    gen.manual_seed(1234)
    sums = {"payoff": 0.0, "payoff_sq": 0.0, "paths": 0}
    n = args.paths_per_chunk

    def step():
        log_s = torch.full((n,), math.log(s0), dtype=torch.float64, device=device)
        for _ in range(n_steps):
            z = torch.randn(n, dtype=torch.float64, device=device, generator=gen)
            log_s.add_(z.mul_(vol).add_(drift))
        payoff = (torch.exp(log_s) - k).clamp_(min=0.0).mul_(math.exp(-r * t))
        sums["payoff"] += float(payoff.sum())
        sums["payoff_sq"] += float((payoff * payoff).sum())
        sums["paths"] += n

    steps, seconds = _measured_window(torch, device, dog, args, step)
    paths = steps * n
    m = sums["payoff"] / sums["paths"]
    se = math.sqrt(max(sums["payoff_sq"] / sums["paths"] - m * m, 0.0) / sums["paths"])
    exact = black_scholes_call(s0, k, r, sigma, t)
    flops = paths * doc["config"]["counted_flops_per_path"]
    doc["result"] = {
        "paths_per_s": round(paths / seconds, 1),
        "measured_paths": paths,
        "measured_seconds": round(seconds, 4),
        "counted_fp64_gflops": round(flops / seconds / 1e9, 4),
        "price": round(m, 6),
        "stderr": round(se, 6),
        "black_scholes": round(exact, 6),
        "within_4_stderr": abs(m - exact) <= 4 * se,
        "seconds_per_1e9_paths": round(seconds / paths * 1e9, 3),
    }
    if not doc["result"]["within_4_stderr"]:
        doc["status"] = "error"
        doc["reason"] = f"Monte Carlo price {m:.4f} is more than 4 standard errors from Black-Scholes {exact:.4f}"


# ----------------------------------------------------------------------------- main

WORKLOADS = {"resnet50-train": run_resnet50, "bert-infer": run_bert, "mc-fp64": run_mc}


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("workload", choices=sorted(WORKLOADS))
    p.add_argument("--device", choices=("auto", "cuda", "cpu"), default="auto")
    p.add_argument("--amp", choices=("auto", "on", "off"), default="auto")
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--batch-sizes", default="1,8,32,128")
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--paths-per-chunk", type=int, default=1 << 22)
    p.add_argument("--time-steps", type=int, default=64)
    p.add_argument("--warmup-steps", type=int, default=10)
    p.add_argument("--min-steps", type=int, default=2)
    p.add_argument("--max-steps", type=int, default=200)
    p.add_argument("--max-seconds", type=float, default=30.0)
    p.add_argument("--step-timeout", type=float, default=120.0, help="bound on each warm-up or measured step")
    p.add_argument("--setup-timeout", type=float, default=300.0, help="bound on importing torch and joining the ranks")
    return p.parse_args(argv)


def main(argv):
    args = parse_args(argv)
    doc = {"tool": TOOL, "schema": SCHEMA, "workload": args.workload, "status": "unknown", "notes": []}
    dog = Watchdog(doc)
    try:
        dog.arm("import torch", args.setup_timeout)
        import torch

        dog.disarm()
        doc["provenance"] = provenance(torch, args)
        doc["status"] = "ok"
        WORKLOADS[args.workload](torch, args, doc, dog)
    except Exception as exc:  # noqa: BLE001 - a failure mid-run is evidence: print it as the result
        dog.disarm()
        oom = "out of memory" in str(exc).lower()
        doc["status"] = "error" if oom else "unknown"
        doc["reason"] = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:500]
    emit(doc)
    return {"ok": 0, "error": 1}.get(doc["status"], EXIT_UNKNOWN)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
