"""How the inference Deployment gets a server that starts and a model to serve.

The NGC Triton image has no default command (its entrypoint prints a banner and runs what it is
given), so the container runs `tritonserver --model-repository=/models` itself (Triton user guide,
"Quickstart" and "Model Repository"). /models is an emptyDir that an init container fills before
the server starts: from `s3://<checkpoint bucket>/models/<team>/` when the team has put models
there (read through EKS Pod Identity, the team's `storage` service account), else with a small
default model - an identity model on Triton's Python backend, which the NGC `-py3` images ship - so
the server comes up ready and pulumi-kubernetes' readiness wait ends. Triton answers
/v2/health/ready only when every model in the repository has loaded (KServe v2 health API).

A team puts its model at s3://<checkpointBucket>/models/<team>/<model>/config.pbtxt and
.../<model>/<version>/<file> (the Triton repository layout) and restarts the Deployment
(`kubectl -n <team> rollout restart deployment/inference`); README "Serving your model".
"""

from __future__ import annotations

from typing import Any

MODELS_DIR = "/models"
DEFAULT_MODEL = "identity"
DEFAULT_MODEL_CONFIGMAP = "inference-default-model"
STORAGE_CONFIGMAP = "inference-storage"
# AWS CLI v2 reads EKS Pod Identity credentials (the container credentials provider) from 2.15.
AWS_CLI_IMAGE = "public.ecr.aws/aws-cli/aws-cli:2.17.0"

DEFAULT_MODEL_PY = '''\
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    """gpuforge's default model: returns its input. Replace it with your own (README)."""

    def execute(self, requests):
        responses = []
        for request in requests:
            data = pb_utils.get_input_tensor_by_name(request, "INPUT0").as_numpy()
            responses.append(pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor("OUTPUT0", data)]))
        return responses
'''

# Fetch the team's models, or fall back to the default one. An empty bucket name (a cluster
# gpuforge does not own, no pod identity) means the default model only. A listing that fails
# (no permission, no bucket) fails the pod: it must not silently serve the default model.
# EKS Pod Identity puts AWS_CONTAINER_CREDENTIALS_FULL_URI and AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE
# into a pod only if the service account's association existed when the pod was admitted (EKS
# user guide, "EKS Pod Identity"); without them the AWS CLI falls back to the node role, which may
# not read the bucket: an AccessDenied restart loop that names nothing. So the script checks first
# and names the missing association.
FETCH_SCRIPT = f'''\
set -eu
models=${{MODELS_DIR:-{MODELS_DIR}}} default=${{DEFAULT_MODEL_DIR:-/default-model}}
if [ -n "${{MODEL_BUCKET:-}}" ]; then
  token=${{AWS_CONTAINER_AUTHORIZATION_TOKEN_FILE:-/nonexistent}}
  if [ -z "${{AWS_CONTAINER_CREDENTIALS_FULL_URI:-}}" ] || [ ! -r "$token" ]; then
    echo "error: no EKS Pod Identity credentials in this pod: the pod identity association for namespace" \\
         "${{POD_NAMESPACE:-?}}, service account ${{POD_SERVICE_ACCOUNT:-?}}, did not exist when the pod was admitted" >&2
    echo "  fix: aws eks list-pod-identity-associations --cluster-name <cluster> --namespace ${{POD_NAMESPACE:-?}}" \\
         "shows it; once it is there: kubectl -n ${{POD_NAMESPACE:-?}} rollout restart deployment/inference" >&2
    exit 1
  fi
  n=$(aws s3api list-objects-v2 --bucket "$MODEL_BUCKET" --prefix "$MODEL_PREFIX" --max-keys 1 \\
      --no-paginate --query KeyCount --output text)
  if [ "$n" != "0" ] && [ "$n" != "None" ]; then
    aws s3 sync --only-show-errors "s3://$MODEL_BUCKET/$MODEL_PREFIX" "$models/"
    echo "models from s3://$MODEL_BUCKET/$MODEL_PREFIX"; exit 0
  fi
fi
cp -RL "$default/." "$models/"
echo "no models under s3://${{MODEL_BUCKET:-(none)}}/${{MODEL_PREFIX:-}}: serving the default {DEFAULT_MODEL} model"
'''


def is_triton(image: str) -> bool:
    return "tritonserver" in image.rsplit("/", 1)[-1]


def default_model_config(max_batch_size: int, max_batch_delay_ms: int) -> str:
    return (
        f'name: "{DEFAULT_MODEL}"\n'
        'backend: "python"\n'
        f"max_batch_size: {max_batch_size}\n"
        'input [ { name: "INPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        'output [ { name: "OUTPUT0" data_type: TYPE_FP32 dims: [ -1 ] } ]\n'
        f"dynamic_batching {{ max_queue_delay_microseconds: {max_batch_delay_ms * 1000} }}\n"
        "instance_group [ { kind: KIND_CPU count: 1 } ]\n"
    )


def default_model_configmap(namespace: str, meta: Any, max_batch_size: int, max_batch_delay_ms: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta(DEFAULT_MODEL_CONFIGMAP, namespace),
        "data": {"config.pbtxt": default_model_config(max_batch_size, max_batch_delay_ms), "model.py": DEFAULT_MODEL_PY},
    }


def storage_configmap(namespace: str, meta: Any, bucket: Any) -> dict[str, Any]:
    """Where the team's models live; `bucket` may be a Pulumi Output (the name holds the account id)."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta(STORAGE_CONFIGMAP, namespace),
        "data": {"MODEL_BUCKET": bucket, "MODEL_PREFIX": f"models/{namespace}/"},
    }


def fetch_models_container(hardening: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": "fetch-models",
        "image": AWS_CLI_IMAGE,
        "command": ["/bin/sh", "-c", FETCH_SCRIPT],
        "envFrom": [{"configMapRef": {"name": STORAGE_CONFIGMAP}}],
        # what the script names when the pod has no pod identity credentials
        "env": [{"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
                {"name": "POD_SERVICE_ACCOUNT", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}}],
        "resources": {"requests": {"cpu": "250m", "memory": "256Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}},
        "volumeMounts": [{"name": "models", "mountPath": MODELS_DIR},
                         {"name": "default-model", "mountPath": "/default-model", "readOnly": True}],
        "securityContext": hardening,
    }


def model_volumes() -> list[dict[str, Any]]:
    return [
        {"name": "models", "emptyDir": {}},
        {"name": "default-model", "configMap": {"name": DEFAULT_MODEL_CONFIGMAP, "items": [
            {"key": "config.pbtxt", "path": f"{DEFAULT_MODEL}/config.pbtxt"},
            {"key": "model.py", "path": f"{DEFAULT_MODEL}/1/model.py"},
        ]}},
    ]


def server_settings(image: str, port: int) -> dict[str, Any]:
    """Command and probes: Triton's own for a Triton image; a TCP probe for any other server."""
    if is_triton(image):
        return {
            "command": ["tritonserver"],
            "args": [f"--model-repository={MODELS_DIR}", f"--http-port={port}", "--exit-on-error=true"],
            "readinessProbe": {"httpGet": {"path": "/v2/health/ready", "port": "http"}, "periodSeconds": 5},
            "livenessProbe": {"httpGet": {"path": "/v2/health/live", "port": "http"}, "initialDelaySeconds": 60},
        }
    return {  # a custom server (e.g. FastAPI + ONNX Runtime) starts itself; it finds models in /models
        "readinessProbe": {"tcpSocket": {"port": "http"}, "periodSeconds": 5},
        "livenessProbe": {"tcpSocket": {"port": "http"}, "initialDelaySeconds": 60},
    }
