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


class PodCredentials:
    """EKS Pod Identity as a pod sees it (EKS user guide, "EKS Pod Identity"; the AWS SDKs'
    container credentials provider): AWS_CONTAINER_CREDENTIALS_FULL_URI names an HTTP endpoint
    (the agent's on 169.254.170.23; here 127.0.0.1, which the SDKs equally accept) that answers
    with temporary credentials when the request's Authorization header carries the token of
    AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE. Serves `keys`; records the tokens it was sent."""

    def __init__(self, tmp_path: Path, keys: tuple[str, str], session_token: str = "pod-session") -> None:
        import http.server
        import json
        import threading

        self.token = "pod-identity-token-" + os.urandom(8).hex()
        tmp_path.mkdir(parents=True, exist_ok=True)
        self.token_file = tmp_path / "eks-pod-identity-token"
        self.token_file.write_text(self.token)
        self.seen: list[str] = []
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                auth = self.headers.get("Authorization", "")
                outer.seen.append(auth)
                if auth != outer.token:
                    self.send_response(401)
                    self.end_headers()
                    return
                body = json.dumps({"AccessKeyId": keys[0], "SecretAccessKey": keys[1], "Token": session_token,
                                   "Expiration": "2099-01-01T00:00:00Z"}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.env = {"AWS_CONTAINER_CREDENTIALS_FULL_URI": f"http://127.0.0.1:{self.server.server_port}/v1/credentials",
                    "AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE": str(self.token_file)}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)


@pytest.fixture
def pod_credentials(aws_env, tmp_path):
    """Pod Identity credentials for the fetch script (moto accepts any keys until auth is enforced)."""
    creds = PodCredentials(tmp_path, ("testing", "testing"))
    try:
        yield creds
    finally:
        creds.close()


def fetch(tmp_path: Path, bucket: str, pod: PodCredentials | None) -> subprocess.CompletedProcess[str]:
    """The init container's script, with the env EKS gives the pod: pod identity variables when
    `pod` is given, and never static keys (the container would have none: no fallback here but the
    container provider, or the node role on a real node)."""
    models = tmp_path / "models"
    models.mkdir(exist_ok=True)
    aws = Path(__file__).resolve().parents[2] / ".venv" / "bin" / "aws"
    base = {k: v for k, v in os.environ.items() if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    env = {**base, "MODEL_BUCKET": bucket, "MODEL_PREFIX": "models/inference/", "MODELS_DIR": str(models),
           "DEFAULT_MODEL_DIR": str(default_model_dir(tmp_path)), "PATH": f"{aws.parent}:{os.environ['PATH']}",
           "POD_NAMESPACE": "inference", "POD_SERVICE_ACCOUNT": "storage", **(pod.env if pod else {})}
    return subprocess.run(["/bin/sh", "-c", serving.FETCH_SCRIPT], env=env, capture_output=True, text=True,
                          timeout=120, check=False)


def test_empty_prefix_serves_the_default_model(pod_credentials, tmp_path) -> None:
    boto3.client("s3").create_bucket(Bucket="ckpt")
    done = fetch(tmp_path, "ckpt", pod_credentials)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "models/identity/config.pbtxt").is_file() and (tmp_path / "models/identity/1/model.py").is_file()


def test_a_teams_models_are_synced(pod_credentials, tmp_path) -> None:
    s3 = boto3.client("s3")
    s3.create_bucket(Bucket="ckpt")
    s3.put_object(Bucket="ckpt", Key="models/inference/bert/config.pbtxt", Body=b'name: "bert"\n')
    s3.put_object(Bucket="ckpt", Key="models/inference/bert/1/model.onnx", Body=b"onnx")
    s3.put_object(Bucket="ckpt", Key="models/research/other/config.pbtxt", Body=b"not ours")
    done = fetch(tmp_path, "ckpt", pod_credentials)
    assert done.returncode == 0, done.stderr
    assert sorted(p.relative_to(tmp_path / "models").as_posix() for p in (tmp_path / "models").rglob("*") if p.is_file()) \
        == ["bert/1/model.onnx", "bert/config.pbtxt"]


def test_an_unreadable_bucket_fails_the_pod_instead_of_serving_the_default(pod_credentials, tmp_path) -> None:
    done = fetch(tmp_path, "no-such-bucket", pod_credentials)
    assert done.returncode != 0
    assert not (tmp_path / "models/identity").exists()


def test_pod_identity_credentials_are_what_reads_the_bucket(aws_env, moto_auth, tmp_path) -> None:
    """With IAM enforced, only the keys the pod identity endpoint serves may read the bucket: the
    sync succeeds, and it asked the endpoint with the pod's token."""
    import json

    iam, s3 = boto3.client("iam"), boto3.client("s3")
    s3.create_bucket(Bucket="ckpt")
    s3.put_object(Bucket="ckpt", Key="models/inference/bert/config.pbtxt", Body=b'name: "bert"\n')
    # the stack's pod role (components/kubernetes/eks.py _pod_identity): trusted by the EKS Pod
    # Identity service, allowed this bucket only; the endpoint serves a session of it, as EKS does
    trust = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"Service": "pods.eks.amazonaws.com"},
                                                      "Action": ["sts:AssumeRole", "sts:TagSession"]}]}
    role = iam.create_role(RoleName="pod-role", AssumeRolePolicyDocument=json.dumps(trust))["Role"]
    iam.put_role_policy(RoleName="pod-role", PolicyName="bucket", PolicyDocument=json.dumps({
        "Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": ["s3:ListBucket", "s3:GetObject"],
                                                "Resource": ["arn:aws:s3:::ckpt", "arn:aws:s3:::ckpt/*"]}]}))
    session = boto3.client("sts").assume_role(RoleArn=role["Arn"], RoleSessionName="eks-inference-pod")["Credentials"]
    pod = PodCredentials(tmp_path, (session["AccessKeyId"], session["SecretAccessKey"]), session["SessionToken"])
    stranger = PodCredentials(tmp_path / "other", ("AKIAIOSFODNN7EXAMPLE", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"))
    try:
        moto_auth(0)
        done = fetch(tmp_path, "ckpt", pod)
        refused = fetch(tmp_path / "other", "ckpt", stranger)  # moto enforces: keys it did not issue are refused
    finally:
        pod.close()
        stranger.close()
    assert refused.returncode != 0 and "InvalidAccessKeyId" in refused.stderr, refused.stderr
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "models/bert/config.pbtxt").read_bytes() == b'name: "bert"\n'
    assert pod.seen and set(pod.seen) == {pod.token}


def test_without_pod_credentials_the_pod_fails_naming_the_missing_association(aws_env, tmp_path) -> None:
    """A pod admitted before its association existed has no pod identity variables: the script
    stops at once and names the association, instead of an AccessDenied loop on the node role."""
    boto3.client("s3").create_bucket(Bucket="ckpt")
    done = fetch(tmp_path, "ckpt", None)
    assert done.returncode == 1
    assert done.stderr.startswith("error: no EKS Pod Identity credentials in this pod: the pod identity association "
                                  "for namespace inference, service account storage, did not exist when the pod was "
                                  "admitted"), done.stderr
    assert "kubectl -n inference rollout restart deployment/inference" in done.stderr
    assert not (tmp_path / "models/identity").exists()  # never the default model instead


def test_the_init_container_knows_its_namespace_and_service_account(nlp) -> None:
    pod = one(nlp, "kubernetes:apps/v1:Deployment").inputs["spec"]["template"]["spec"]
    (init,) = pod["initContainers"]
    fields = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in init["env"]}
    assert fields == {"POD_NAMESPACE": "metadata.namespace", "POD_SERVICE_ACCOUNT": "spec.serviceAccountName"}
