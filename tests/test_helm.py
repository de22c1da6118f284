"""The Helm chart, checked offline: Helm's own Go SDK (PyPI helm-python-sdk, no helm binary)
lints it strictly and renders several values profiles; every rendered object must pass
kubernetes-validate in strict mode (unknown fields fail; a kind without a schema fails)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

CHART = Path(__file__).resolve().parents[1] / "helm" / "lucid-hub"
KUBE_VERSION = "1.30.0"

helm = pytest.importorskip("helm_python", reason="helm-python-sdk is not installed: pip install -e '.[test]'")
kubernetes_validate = pytest.importorskip("kubernetes_validate",
                                          reason="kubernetes-validate is not installed: pip install -e '.[test]'")

PROFILES: dict[str, dict[str, Any]] = {
    "minimal": {"database": {"url": "postgresql+psycopg://lucid@db/lucid"}},
    "production": {
        "publicUrl": "https://hub.acme.example",
        "database": {"existingSecret": "lucid-db"},
        "kafka": {"bootstrap": "kafka-0.kafka:9092,kafka-1.kafka:9092", "topic": "acme-patches"},
        "oidc": {"trustedIssuers": '[{"issuer": "https://id.acme.example/realms/partners"}]'},
        "signingKey": {"existingSecret": "lucid-signing-key"},
        "workers": {"replicas": 3},
        "ingress": {"enabled": True, "className": "nginx", "host": "hub.acme.example", "tlsSecret": "hub-tls"},
        "autoscaling": {"enabled": True},
        "podDisruptionBudget": {"enabled": True},
        "networkPolicy": {"enabled": True},
        "extraEnv": {"LUCID_LEASE_MAX": "864000"},
    },
    "mirror-only": {"profile": "mirror-only", "database": {"url": "postgresql+psycopg://globex@db/lucid"},
                    "publicUrl": "https://hub.globex.example"},
}


def render(values: dict[str, Any]) -> list[dict[str, Any]]:
    chart = helm.Chart.load(CHART)
    manifests = chart.render(values, name="acme", namespace="lucid", is_install=True)
    objects = []
    for path, text in sorted(manifests.items()):
        if path.endswith("NOTES.txt"):
            continue
        objects += [doc for doc in yaml.safe_load_all(text) if doc]
    return objects


def test_the_chart_lints_strictly_with_every_profile() -> None:
    for name, values in PROFILES.items():
        report = helm.lint(CHART, values, strict=True, kube_version=f"v{KUBE_VERSION}")
        problems = [m for m in report["messages"] if m["severity"] >= 2] + report["errors"]
        assert problems == [], f"{name}: {problems}"


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_every_rendered_object_is_valid_kubernetes(profile: str) -> None:
    objects = render(PROFILES[profile])
    assert objects
    for obj in objects:  # strict: unknown fields fail; SchemaNotFoundError fails the test too
        kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
    kinds = sorted({o["kind"] for o in objects})
    expected = {"ConfigMap", "Deployment", "Job", "PersistentVolumeClaim", "Pod", "Service", "ServiceAccount"}
    assert expected <= set(kinds), kinds
    if profile == "production":
        assert {"Ingress", "HorizontalPodAutoscaler", "PodDisruptionBudget", "NetworkPolicy"} <= set(kinds)
        assert "Secret" not in kinds  # the database URL comes from the operator's Secret
    else:
        assert "Secret" in kinds


def _by(objects: list[dict[str, Any]], kind: str, component: str | None = None) -> list[dict[str, Any]]:
    return [o for o in objects if o["kind"] == kind and (
        component is None or o["metadata"]["labels"].get("app.kubernetes.io/component") == component)]


def _containers(obj: dict[str, Any]) -> list[dict[str, Any]]:
    spec = obj["spec"]["template"]["spec"] if "template" in obj["spec"] else obj["spec"]
    return list(spec["containers"])


def test_migration_hook_probes_and_security_context() -> None:
    objects = render(PROFILES["production"])
    (migrate,) = _by(objects, "Job", "migrate")
    annotations = migrate["metadata"]["annotations"]
    assert annotations["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert _containers(migrate)[0]["args"] == ["db", "upgrade"]
    (hub,) = _by(objects, "Deployment", "hub")
    container = _containers(hub)[0]
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert hub["spec"]["strategy"]["type"] == "Recreate"
    assert len(hub["spec"]["template"]["metadata"]["annotations"]["checksum/config"]) == 64
    (worker,) = _by(objects, "Deployment", "worker")
    assert _containers(worker)[0]["args"] == ["worker"] and "replicas" not in worker["spec"]  # the HPA's
    pods = [o for o in objects if o["kind"] in ("Deployment", "Job", "Pod")]
    for obj in pods:
        spec = obj["spec"]["template"]["spec"] if "template" in obj["spec"] else obj["spec"]
        assert spec["securityContext"]["runAsNonRoot"] is True, obj["metadata"]["name"]
        for c in _containers(obj):
            assert c["securityContext"]["readOnlyRootFilesystem"] is True
            assert c["securityContext"]["allowPrivilegeEscalation"] is False
            assert c["securityContext"]["capabilities"]["drop"] == ["ALL"]
            assert "limits" in c["resources"]
    for obj in objects:
        labels = obj["metadata"]["labels"]
        assert labels["app.kubernetes.io/name"] == "lucid-hub" and labels["app.kubernetes.io/instance"] == "acme"
    config = _by(objects, "ConfigMap")[0]["data"]
    assert config["LUCID_KAFKA_BOOTSTRAP"].startswith("kafka-0") and config["LUCID_DELIVER_IN_PROCESS"] == "false"
    policy = _by(objects, "NetworkPolicy")[0]
    assert {"port": 53, "protocol": "UDP"} in policy["spec"]["egress"][0]["ports"]


def test_mirror_only_has_no_workers_and_delivers_in_process() -> None:
    objects = render(PROFILES["mirror-only"])
    assert _by(objects, "Deployment", "worker") == []
    assert _by(objects, "ConfigMap")[0]["data"]["LUCID_DELIVER_IN_PROCESS"] == "true"


def test_bad_values_are_refused_with_a_reason() -> None:
    with pytest.raises(helm.HelmError, match=r"database\.url"):
        render({})  # no database: the archive would not outlive its pod
    with pytest.raises(helm.HelmError, match="profile"):
        render({**PROFILES["minimal"], "profile": "everything"})
    with pytest.raises(helm.HelmError, match="publicUrl"):
        render({**PROFILES["minimal"], "publicUrl": "hub.example.com"})
