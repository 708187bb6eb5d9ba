"""Offline schema validation of Kubernetes manifests (kubernetes-validate, strict: unknown
fields fail too). Used by the tests and by `gpuforge preview` on every recorded kubernetes:*
resource."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SchemaProblem:
    obj: str  # kind/namespace/name
    error: str


def object_name(doc: dict[str, Any]) -> str:
    meta = doc.get("metadata") or {}
    ns = f"{meta['namespace']}/" if meta.get("namespace") else ""
    return f"{doc.get('kind', '?')}/{ns}{meta.get('name', '?')}"


def validate_manifests(docs: Iterable[dict[str, Any]], version: str) -> list[SchemaProblem]:
    """Every problem found (kubernetes-validate stops at the first error per document)."""
    import kubernetes_validate  # only when validating: it loads bundled schemas

    problems = []
    for doc in docs:
        try:
            kubernetes_validate.validate(doc, version, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(str(p) for p in exc.path) or "(top)"
            problems.append(SchemaProblem(object_name(doc), f"{where}: {exc.message}"))
        except (kubernetes_validate.SchemaNotFoundError, kubernetes_validate.InvalidSchemaError) as exc:
            problems.append(SchemaProblem(object_name(doc), f"no schema for it in Kubernetes {version}: {exc}"))
    return problems


def recorded_manifests(resources: Iterable[Any]) -> list[dict[str, Any]]:
    """The manifests of the kubernetes:* resources of a recorded graph (their inputs are the
    manifest: apiVersion, kind, metadata, spec...). Providers are not Kubernetes objects."""
    return [dict(r.inputs) for r in resources if r.type.startswith("kubernetes:") and r.custom]
