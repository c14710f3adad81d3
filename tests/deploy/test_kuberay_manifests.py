"""The KubeRay manifests under deploy/kuberay/ are valid for the API server that would take them.

No Kubernetes cluster runs here, so this is the check `kubectl apply --dry-run=server` would make for
the custom resource: each RayCluster is validated against the openAPIV3Schema of KubeRay 1.7.0's
RayCluster CRD (`ray.io/v1`), vendored in deploy/kuberay/schema/. Core kinds (the Service) are checked
for the fields the API server requires; their full schemas are not vendored.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

KUBERAY = Path(__file__).resolve().parents[2] / "deploy" / "kuberay"
SCHEMAS = {("ray.io/v1", "RayCluster"): KUBERAY / "schema" / "raycluster-v1.json"}
CORE_KINDS = {("v1", "Service")}


def _documents() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in sorted(KUBERAY.glob("*.yaml")):
        for index, document in enumerate(yaml.safe_load_all(path.read_text())):
            if document is not None:
                found.append((f"{path.name}#{index}", document))
    return found


DOCUMENTS = _documents()


def test_there_is_a_raycluster() -> None:
    assert any(doc["kind"] == "RayCluster" for _, doc in DOCUMENTS)


@pytest.mark.parametrize(("where", "document"), DOCUMENTS, ids=[where for where, _ in DOCUMENTS])
def test_manifest_is_valid(where: str, document: dict[str, Any]) -> None:
    key = (document.get("apiVersion"), document.get("kind"))
    assert key in SCHEMAS or key in CORE_KINDS, f"{where}: no schema for {key}"
    assert document["metadata"]["name"], where
    if key in SCHEMAS:
        schema = json.loads(SCHEMAS[key].read_text())
        errors = sorted(jsonschema.Draft7Validator(schema).iter_errors(document), key=lambda e: e.path)
        assert not errors, "\n".join(f"{where}: {list(e.path)}: {e.message}" for e in errors)


def test_the_schema_check_catches_a_broken_manifest() -> None:
    schema = json.loads(SCHEMAS["ray.io/v1", "RayCluster"].read_text())
    cluster = next(doc for _, doc in DOCUMENTS if doc["kind"] == "RayCluster")
    broken = json.loads(json.dumps(cluster))
    broken["spec"]["workerGroupSpecs"][0]["replicas"] = "two"  # an integer field
    del broken["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["name"]  # required
    assert len(list(jsonschema.Draft7Validator(schema).iter_errors(broken))) == 2


def test_the_head_runs_the_entry_point_with_the_replica_resource_the_workers_offer() -> None:
    cluster = next(doc for _, doc in DOCUMENTS if doc["kind"] == "RayCluster")
    command = " ".join(cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["args"])
    words = shlex.split(command.replace(";", " ; ").replace("&&", " && "))
    assert "--ray" in words
    needed = json.loads(words[words.index("--replica-resources") + 1])
    offered = json.loads(json.loads(cluster["spec"]["workerGroupSpecs"][0]["rayStartParams"]["resources"]))
    assert set(needed) <= set(offered)


def test_a_head_leasing_cluster_sandboxes_has_a_worker_group_offering_sandbox_slots() -> None:
    cluster = next(doc for _, doc in DOCUMENTS if doc["kind"] == "RayCluster")
    command = " ".join(cluster["spec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["args"])
    words = shlex.split(command.replace(";", " ; ").replace("&&", " && "))
    assert words[words.index("--sandbox-backend") + 1] == "ray"
    offering = [
        group
        for group in cluster["spec"]["workerGroupSpecs"]
        if "sandbox" in json.loads(json.loads(group["rayStartParams"].get("resources", '"{}"')))
    ]
    assert offering and all(group["minReplicas"] >= 1 for group in offering)
