"""deploy/: the Kubernetes manifests and the compose file, validated offline against schemas."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from .._required import require

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def documents():
    return list(yaml.safe_load_all((DEPLOY / "k8s" / "triton.yaml").read_text()))


def test_every_manifest_is_valid_kubernetes():
    kv = require("kubernetes_validate")
    docs = documents()
    assert [d["kind"] for d in docs] == [
        "Namespace",
        "PersistentVolumeClaim",
        "Deployment",
        "Service",
    ]
    for doc in docs:
        kv.validate(doc, "1.33", strict=True)


def test_a_broken_manifest_is_caught():
    kv = require("kubernetes_validate")
    deployment = documents()[2]
    deployment["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["paht"] = (
        "/v2/health/ready"
    )
    with pytest.raises(kv.ValidationError):
        kv.validate(deployment, "1.33", strict=True)


def test_the_deployment_serves_triton_as_the_client_expects():
    _, claim, deployment, service = documents()
    pod = deployment["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert container["readinessProbe"]["httpGet"]["path"] == "/v2/health/ready"
    assert container["livenessProbe"]["httpGet"]["path"] == "/v2/health/live"
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert "--model-repository=" + mounts["models"] in container["args"]
    volume = next(v for v in pod["volumes"] if v["name"] == "models")
    assert volume["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert service["spec"]["clusterIP"] == "None"  # headless: DNS lists every pod
    assert service["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    grpc = next(p for p in service["spec"]["ports"] if p["name"] == "grpc")
    assert grpc["port"] == 8001


def test_the_compose_file_is_valid():
    compose_spec = require("compose_spec")
    text = (DEPLOY / "compose.yaml").read_text()
    compose = compose_spec.PyCompose.from_yaml(text)
    triton = compose.to_dict()["services"]["triton"]
    devices = triton["deploy"]["resources"]["reservations"]["devices"]
    assert devices[0]["capabilities"] == ["gpu"]
    assert "http://localhost:8000/v2/health/ready" in triton["healthcheck"]["test"]
    with pytest.raises(ValueError, match="shm_sizes"):
        compose_spec.PyCompose.from_yaml(text.replace("shm_size:", "shm_sizes:"))
