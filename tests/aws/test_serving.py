"""Item 11 of issue 10: the inference Deployment becomes ready. The Triton image starts no server
by itself and needs a model repository; components/kubernetes/serving.py gives it both.

The pods' model-fetch script runs here for real, with the real AWS CLI, against a moto S3 server
(tests/support/moto_server.py); Triton itself cannot run on this machine (no GPU, no NGC image)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import boto3
import pytest

from gpuforge.components.kubernetes import serving
from gpuforge.preview import run_preview
from tests.aws.conftest import ROOT, one

CM = "kubernetes:core/v1:ConfigMap"


@pytest.fixture(scope="module")
def nlp():
    return run_preview(ROOT, "nlp-inference").run


def test_triton_starts_with_the_model_repository_and_triton_readiness(nlp) -> None:
    pod = one(nlp, "kubernetes:apps/v1:Deployment").inputs["spec"]["template"]["spec"]
    (server,) = pod["containers"]
    assert server["image"].startswith("nvcr.io/nvidia/tritonserver:")
    assert server["command"] == ["tritonserver"]
    assert "--model-repository=/models" in server["args"] and "--http-port=8000" in server["args"]
    assert server["readinessProbe"]["httpGet"] == {"path": "/v2/health/ready", "port": "http"}
    assert {"name": "models", "mountPath": "/models"} in server["volumeMounts"]
    (fetch,) = pod["initContainers"]
    assert fetch["envFrom"] == [{"configMapRef": {"name": "inference-storage"}}]
    assert pod["serviceAccountName"] == "storage"  # EKS Pod Identity reads the bucket (tests/aws/test_pod_access.py)


def test_models_come_from_the_stacks_bucket_under_the_team(nlp) -> None:
    storage = one(nlp, CM, "inference-storage").inputs["data"]
    outputs = run_preview(ROOT, "nlp-inference").run.outputs
    assert storage == {"MODEL_BUCKET": outputs["checkpointBucket"], "MODEL_PREFIX": "models/inference/"}
    default = one(nlp, CM, "default-model").inputs["data"]
    assert 'backend: "python"' in default["config.pbtxt"] and "max_batch_size: 32" in default["config.pbtxt"]
    assert "max_queue_delay_microseconds: 10000" in default["config.pbtxt"]  # inferenceMaxBatchDelayMs 10
    compile(default["model.py"], "model.py", "exec")  # the Python backend imports it at load


def default_model_dir(tmp_path: Path) -> Path:
    """The default-model ConfigMap as its volume projects it (serving.model_volumes items)."""
    data = {"config.pbtxt": serving.default_model_config(32, 10), "model.py": serving.DEFAULT_MODEL_PY}
    (cm,) = [v for v in serving.model_volumes() if "configMap" in v]
    root = tmp_path / "default-model"
    for item in cm["configMap"]["items"]:
        path = root / item["path"]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(data[item["key"]])
    return root


def fetch(tmp_path: Path, bucket: str) -> subprocess.CompletedProcess[str]:
    models = tmp_path / "models"
    models.mkdir(exist_ok=True)
    aws = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "aws"
    env = {**os.environ, "MODEL_BUCKET": bucket, "MODEL_PREFIX": "models/inference/", "MODELS_DIR": str(models),
           "DEFAULT_MODEL_DIR": str(default_model_dir(tmp_path)), "PATH": f"{aws.parent}:{os.environ['PATH']}"}
    return subprocess.run(["/bin/sh", "-c", serving.FETCH_SCRIPT], env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def test_empty_prefix_serves_the_default_model(aws_env, tmp_path) -> None:
    boto3.client("s3").create_bucket(Bucket="ckpt")
    done = fetch(tmp_path, "ckpt")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "models/identity/config.pbtxt").is_file() and (tmp_path / "models/identity/1/model.py").is_file()


def test_a_teams_models_are_synced(aws_env, tmp_path) -> None:
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="ckpt")
    s3.put_object(Bucket="ckpt", Key="models/inference/bert/config.pbtxt", Body=b'name: "bert"\n')
    s3.put_object(Bucket="ckpt", Key="models/inference/bert/1/model.onnx", Body=b"onnx")
    s3.put_object(Bucket="ckpt", Key="models/research/other/config.pbtxt", Body=b"not ours")
    done = fetch(tmp_path, "ckpt")
    assert done.returncode == 0, done.stderr
    assert sorted(p.relative_to(tmp_path / "models").as_posix() for p in (tmp_path / "models").rglob("*") if p.is_file()) \
        == ["bert/1/model.onnx", "bert/config.pbtxt"]


def test_an_unreadable_bucket_fails_the_pod_instead_of_serving_the_default(aws_env, tmp_path) -> None:
    done = fetch(tmp_path, "no-such-bucket")
    assert done.returncode != 0
    assert not (tmp_path / "models/identity").exists()
