"""The Helm chart, checked offline: Helm's own Go SDK (PyPI helm-python-sdk, no helm binary)
lints it strictly and renders several values profiles; every rendered object must pass
kubernetes-validate in strict mode (unknown fields fail; a kind without a schema fails)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

CHART = Path(__file__).resolve().parents[1] / "helm" / "lucid-hub"
SCHEMAS = CHART.parent / "schemas"
KUBE_VERSION = "1.30.0"

helm = pytest.importorskip("helm_python", reason="helm-python-sdk is not installed: pip install -e '.[test]'")
kubernetes_validate = pytest.importorskip("kubernetes_validate",
                                          reason="kubernetes-validate is not installed: pip install -e '.[test]'")

SPARK = {"graph": "https://acme.example/graphs/kpi", "snapshot": "/snapshots/kpi.nt.gz",
         "snapshotsClaim": "kpi-snapshots", "client": {"existingSecret": "bulk-publisher"}}
PROFILES: dict[str, dict[str, Any]] = {
    "minimal": {"database": {"url": "postgresql+psycopg://lucid@db/lucid"}},
    "production": {
        "publicUrl": "https://hub.acme.example",
        "database": {"existingSecret": "lucid-db"},
        "kafka": {"bootstrap": "kafka-0.kafka:9092,kafka-1.kafka:9092", "topic": "acme-patches"},
        "oidc": {"trustedIssuers": '[{"issuer": "https://id.acme.example/realms/partners", "audience": "lucid-hub", '
                                   '"jwks_uri": "https://id.acme.example/realms/partners/protocol/openid-connect/certs"}]'},
        "signingKey": {"existingSecret": "lucid-signing-key"},
        "workers": {"replicas": 3},
        "ingress": {"enabled": True, "className": "nginx", "host": "hub.acme.example", "tlsSecret": "hub-tls"},
        "hub": {"trustedProxies": "10.42.0.0/16"},
        "autoscaling": {"enabled": True},
        "podDisruptionBudget": {"enabled": True},
        "networkPolicy": {"enabled": True},
        "extraEnv": {"LUCID_LEASE_MAX": "864000"},
        "metrics": {"serviceMonitor": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
                    "prometheusRule": {"enabled": True, "labels": {"release": "kube-prometheus-stack"}},
                    "grafanaDashboard": {"enabled": True}},
    },
    "replicated": {
        "database": {"existingSecret": "lucid-db"}, "signingKey": {"existingSecret": "lucid-signing-key"},
        "kafka": {"bootstrap": "kafka-0.kafka:9092"}, "podDisruptionBudget": {"enabled": True},
        "hub": {"autoscaling": {"enabled": True, "minReplicas": 3, "maxReplicas": 10}, "leaderLeaseSeconds": 8},
    },
    "mirror-only": {"profile": "mirror-only", "database": {"url": "postgresql+psycopg://globex@db/lucid"},
                    "publicUrl": "https://hub.globex.example"},
    "spark-job": {"database": {"url": "postgresql+psycopg://lucid@db/lucid"}, "spark": {
        **SPARK, "job": {"enabled": True, "master": "k8s://https://kubernetes.default.svc"}}},
    "spark-operator": {"database": {"url": "postgresql+psycopg://lucid@db/lucid"}, "spark": {
        **SPARK, "conf": "spark.sql.shuffle.partitions=64, spark.executor.memoryOverhead=1g",
        "job": {"enabled": True, "schedule": "0 3 * * *"},
        "operator": {"enabled": True, "image": "registry.acme.example/lucid-hub-spark:0.1.0"}}},
    "kafka-secured": {"database": {"existingSecret": "lucid-db"}, "kafka": {
        "bootstrap": "b-1.kafka.acme.example:9096", "securityProtocol": "SASL_SSL",
        "tls": {"existingSecret": "kafka-ca", "certKey": "tls.crt"},
        "sasl": {"mechanism": "SCRAM-SHA-512", "username": "acme", "existingSecret": "kafka-sasl"}}},
}
# Custom resources: kubernetes-validate has no schemas for them; ours are in helm/schemas.
CUSTOM_SCHEMAS = {"SparkApplication": "sparkapplication-sparkoperator-v1beta2.json",
                  "ServiceMonitor": "servicemonitor-monitoring-v1.json",
                  "PrometheusRule": "prometheusrule-monitoring-v1.json"}


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


def validate(obj: dict[str, Any]) -> None:
    """Strict validation: kubernetes-validate for built-in kinds (SchemaNotFoundError fails),
    the repository's schemas for custom resources, nested types from the same definitions."""
    if obj["kind"] not in CUSTOM_SCHEMAS:
        kubernetes_validate.validate(obj, KUBE_VERSION, strict=True)
        return
    import json
    from importlib.resources import files

    import jsonschema
    from referencing import Registry, Resource

    definitions = json.loads(files("kubernetes_validate").joinpath(
        f"kubernetes-json-schema/v{KUBE_VERSION}-local-strict/_definitions.json").read_text())
    schema = json.loads((SCHEMAS / CUSTOM_SCHEMAS[obj["kind"]]).read_text())
    registry = Resource.from_contents(definitions) @ Registry()
    jsonschema.Draft202012Validator(schema, registry=registry).validate(obj)


@pytest.mark.parametrize("profile", sorted(PROFILES))
def test_every_rendered_object_is_valid_kubernetes(profile: str) -> None:
    objects = render(PROFILES[profile])
    assert objects
    for obj in objects:
        validate(obj)
    kinds = sorted({o["kind"] for o in objects})
    expected = {"ConfigMap", "Deployment", "Job", "Pod", "Service", "ServiceAccount"}
    assert expected <= set(kinds), kinds
    hub_kind = "StatefulSet" if profile == "replicated" else "Deployment"
    assert len(_by(objects, hub_kind, "hub")) == 1 and ("PersistentVolumeClaim" in kinds) == (profile != "replicated")
    if profile in ("production", "kafka-secured"):
        assert "Secret" not in kinds  # the database URL and Kafka's secrets come from the operator's Secrets
    if profile == "production":
        assert {"Ingress", "HorizontalPodAutoscaler", "PodDisruptionBudget", "NetworkPolicy",
                "ServiceMonitor"} <= set(kinds)
    elif profile == "replicated":
        assert [s["metadata"]["name"] for s in _by(objects, "Secret")] == ["acme-lucid-hub-session"]
    elif profile != "kafka-secured":
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


def test_the_custom_resource_schemas_are_strict() -> None:
    import copy

    import jsonschema

    (app,) = _by(render(PROFILES["spark-operator"]), "SparkApplication")
    (monitor,) = _by(render(PROFILES["production"]), "ServiceMonitor")
    for obj, path, bad in ((app, ("spec", "driver"), {"cpus": 1}), (app, ("spec",), {"type": "Go"}),
                           (app, ("spec", "driver", "env", 0), {"valueFrm": "x"}),  # a nested Kubernetes type
                           (monitor, ("spec", "endpoints", 0), {"interval": "30 seconds"})):
        broken = copy.deepcopy(obj)
        target = broken
        for key in path:
            target = target[key]
        target.update(bad)
        with pytest.raises(jsonschema.ValidationError):
            validate(broken)
    for required in ("driver", "sparkVersion"):
        broken = copy.deepcopy(app)
        del broken["spec"][required]
        with pytest.raises(jsonschema.ValidationError, match=required):
            validate(broken)


def test_spark_publish_job_template_and_spark_application() -> None:
    objects = render(PROFILES["spark-operator"])
    (cron,) = _by(objects, "CronJob", "spark-publish")
    assert cron["spec"]["schedule"] == "0 3 * * *" and cron["spec"]["suspend"] is False
    assert cron["spec"]["concurrencyPolicy"] == "Forbid"
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"] == ["publish", "/snapshots/kpi.nt.gz", "--graph", "https://acme.example/graphs/kpi",
                                 "--hub", "http://acme-lucid-hub:80", "--engine", "spark", "--message", "bulk snapshot"]
    assert container["image"] == "ghcr.io/lucid-hub/lucid-hub-spark:0.1.0"  # the Dockerfile's spark target
    env = {e["name"]: e for e in container["env"]}
    assert env["LUCID_CLIENT_SECRET"]["valueFrom"]["secretKeyRef"] == {"name": "bulk-publisher", "key": "client-secret"}
    assert env["LUCID_SPARK_MASTER"]["value"] == "local[*]"
    assert env["LUCID_SPARK_CONF"]["value"].startswith("spark.local.dir=/tmp,spark.sql.shuffle.partitions=64")
    assert pod["automountServiceAccountToken"] is False  # local Spark needs no Kubernetes API
    assert {"mountPath": "/snapshots", "name": "snapshots", "readOnly": True} in container["volumeMounts"]
    (app,) = _by(objects, "SparkApplication")
    spec = app["spec"]
    assert (spec["type"], spec["mode"], spec["image"]) == ("Python", "cluster", "registry.acme.example/lucid-hub-spark:0.1.0")
    assert spec["mainApplicationFile"].endswith("lucid_hub/commands/spark_publish.py")
    assert spec["arguments"][:3] == ["/snapshots/kpi.nt.gz", "--graph", "https://acme.example/graphs/kpi"]
    assert spec["sparkConf"]["spark.executor.memoryOverhead"] == "1g"
    assert spec["driver"]["serviceAccount"] == "acme-lucid-hub-spark"
    assert spec["driver"]["securityContext"]["readOnlyRootFilesystem"] is True
    (role,) = _by(objects, "Role")
    assert {r for rule in role["rules"] for r in rule["resources"]} == {
        "pods", "services", "configmaps", "persistentvolumeclaims"}
    (binding,) = _by(objects, "RoleBinding")
    assert binding["subjects"][0]["name"] == "acme-lucid-hub-spark"
    # On demand only (no schedule): suspended; executors on Kubernetes: the driver's account can create pods.
    job_only = render(PROFILES["spark-job"])
    (cron,) = _by(job_only, "CronJob", "spark-publish")
    assert cron["spec"]["suspend"] is True
    pod = cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "acme-lucid-hub-spark" and pod["automountServiceAccountToken"] is True
    assert _by(job_only, "SparkApplication") == [] and len(_by(job_only, "Role")) == 1
    assert _by(render(PROFILES["minimal"]), "CronJob") == []


def test_metrics_port_and_service_monitor() -> None:
    objects = render(PROFILES["production"])
    (monitor,) = _by(objects, "ServiceMonitor")
    assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    assert monitor["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "scheme": "http",
                                             "interval": "30s", "honorLabels": False}]
    services = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Service"}
    selected = monitor["spec"]["selector"]["matchLabels"]
    for name in ("acme-lucid-hub", "acme-lucid-hub-worker"):  # both carry a metrics port the monitor selects
        labels = services[name]["metadata"]["labels"]
        assert all(labels[k] == v for k, v in selected.items())
        assert "metrics" in [p["name"] for p in services[name]["spec"]["ports"]]
    ingress = _by(objects, "Ingress")[0]
    backends = [p["backend"]["service"]["port"] for r in ingress["spec"]["rules"] for p in r["http"]["paths"]]
    assert all(b != {"name": "metrics"} and b.get("number") != 9102 for b in backends)  # metrics stay inside
    config = _by(objects, "ConfigMap")[0]["data"]
    assert config["LUCID_METRICS_PORT"] == "9102" and config["LUCID_LOG_FORMAT"] == "json"
    assert (config["LUCID_WEB_WORKERS"], config["LUCID_WEB_THREADS"]) == ("1", "8")
    # sized for the 1Gi hub pod: bodies and SPARQL workers (plain integers, as the hub reads them)
    assert (config["LUCID_MAX_BODY_BYTES"], config["LUCID_SPARQL_WORKERS"], config["LUCID_SPARQL_MEMORY_MB"]) == (
        "16777216", "2", "1536")
    assert config["LUCID_TRUSTED_PROXIES"] == "10.42.0.0/16"
    minimal = _by(render(PROFILES["minimal"]), "ConfigMap")[0]["data"]
    assert "LUCID_TRUSTED_PROXIES" not in minimal  # none unless the operator names them
    with pytest.raises(helm.HelmError, match="memoryMb"):
        render({**PROFILES["minimal"], "hub": {"sparql": {"memoryMb": 256}}})
    workers = render({**PROFILES["minimal"], "hub": {"workers": 3, "push": {"perAddress": 40}}})
    assert _by(workers, "ConfigMap")[0]["data"]["LUCID_WEB_WORKERS"] == "3"
    assert _by(workers, "ConfigMap")[0]["data"]["LUCID_PUSH_PER_ADDRESS"] == "40"
    assert config["LUCID_PUSH_MAX_CONNECTIONS"] == "10000" and config["LUCID_PUSH_PER_CLIENT"] == "64"
    old = render({**PROFILES["minimal"], "hub": {"gunicornWorkers": 2, "gunicornThreads": 16}})  # values before 0.2
    assert (_by(old, "ConfigMap")[0]["data"]["LUCID_WEB_WORKERS"], _by(old, "ConfigMap")[0]["data"][
        "LUCID_WEB_THREADS"]) == ("2", "16")
    with pytest.raises(helm.HelmError, match="workers"):
        render({**PROFILES["minimal"], "hub": {"workers": 0}})
    with pytest.raises(helm.HelmError, match="perClient"):
        render({**PROFILES["minimal"], "hub": {"push": {"perClient": 0}}})
    (worker,) = _by(objects, "Deployment", "worker")
    assert _containers(worker)[0]["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    policy = _by(objects, "NetworkPolicy")[0]
    assert {"port": 9102, "protocol": "TCP"} in policy["spec"]["ingress"][1]["ports"]


def test_spark_values_are_checked_with_a_reason() -> None:
    base = PROFILES["minimal"]
    with pytest.raises(helm.HelmError, match=r"spark\.operator\.image is required"):
        render({**base, "spark": {**SPARK, "operator": {"enabled": True}}})
    with pytest.raises(helm.HelmError, match=r"spark\.snapshotsClaim is required"):
        render({**base, "spark": {**SPARK, "snapshotsClaim": "", "job": {"enabled": True}}})
    with pytest.raises(helm.HelmError, match=r"spark\.client is required"):
        render({**base, "spark": {**SPARK, "client": {"id": "lc-1"}, "job": {"enabled": True}}})
    # Or the chart makes the client's Secret from values, and the job reads it.
    objects = render({**base, "spark": {**SPARK, "client": {"id": "lc-1", "secret": "s3cret"}, "job": {"enabled": True}}})
    (secret,) = [o for o in _by(objects, "Secret") if o["metadata"]["name"] == "acme-lucid-hub-spark-client"]
    assert secret["stringData"] == {"client-id": "lc-1", "client-secret": "s3cret"}
    (cron,) = _by(objects, "CronJob", "spark-publish")
    env = {e["name"]: e for e in cron["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["LUCID_CLIENT_ID"]["valueFrom"]["secretKeyRef"]["name"] == "acme-lucid-hub-spark-client"
    with pytest.raises(helm.HelmError, match="master"):
        render({**base, "spark": {**SPARK, "job": {"enabled": True, "master": "mesos://x"}}})
    with pytest.raises(helm.HelmError, match="port"):
        render({**base, "metrics": {"port": 8080}})  # the API's port


def test_replicas_are_a_stateful_set_with_a_store_each_a_lease_and_rolling_updates() -> None:
    objects = render(PROFILES["replicated"])
    assert _by(objects, "Deployment", "hub") == []
    (hub,) = _by(objects, "StatefulSet", "hub")
    spec = hub["spec"]
    assert "replicas" not in spec  # the HPA's
    assert spec["updateStrategy"]["type"] == "RollingUpdate" and spec["podManagementPolicy"] == "Parallel"
    assert spec["volumeClaimTemplates"][0]["metadata"]["name"] == "data"
    headless = [s for s in _by(objects, "Service", "hub") if s["spec"].get("clusterIP") == "None"]
    assert [s["metadata"]["name"] for s in headless] == [spec["serviceName"]]
    pod = spec["template"]["spec"]
    assert "persistentVolumeClaim" not in str(pod["volumes"])  # the claim template's, one per replica
    mounts = {m["mountPath"] for m in _containers(hub)[0]["volumeMounts"]}
    assert {"/data", "/data/keys/signing-key.pem", "/data/keys/session-secret"} <= mounts
    term = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    (hpa,) = [h for h in _by(objects, "HorizontalPodAutoscaler") if h["spec"]["scaleTargetRef"]["kind"] == "StatefulSet"]
    assert hpa["spec"]["minReplicas"] == 3 and hpa["spec"]["maxReplicas"] == 10
    (pdb,) = [p for p in _by(objects, "PodDisruptionBudget") if p["metadata"]["name"].endswith("-hub")]
    assert pdb["spec"]["maxUnavailable"] == 1
    config = _by(objects, "ConfigMap")[0]["data"]
    assert config["LUCID_LEADER_LEASE_SECONDS"] == "8" and config["LUCID_PUBLISH_DB_LOCK"] == "true"
    assert config["LUCID_READY_MAX_LAG"] == "1000"
    single = _by(render(PROFILES["minimal"]), "ConfigMap")[0]["data"]
    assert single["LUCID_PUBLISH_DB_LOCK"] == "false"  # one replica: no lock to take turns by


def test_replicas_without_a_shared_signing_key_are_refused() -> None:
    with pytest.raises(helm.HelmError, match=r"signingKey\.existingSecret"):
        render({**PROFILES["minimal"], "hub": {"replicas": 2}})


def _hub_container(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (hub,) = [o for o in objects if o["kind"] in ("Deployment", "StatefulSet")
              and o["metadata"]["name"] == "acme-lucid-hub"]
    (container,) = [c for c in hub["spec"]["template"]["spec"]["containers"] if c["name"] == "hub"]
    return dict(container)


@pytest.mark.slow
@pytest.mark.parametrize("profile", ["defaults", *sorted(set(PROFILES) - {"kafka-secured"})])  # (its own test below)
def test_every_configuration_the_chart_renders_starts_a_real_hub(profile: str, tmp_path: Path,
                                                                 kafka_bootstrap: str) -> None:
    """What the chart renders must be loadable by the hub it deploys: the ConfigMap's settings
    and access conditions and the container's literal environment, given to `lucid-hub serve`,
    start a hub that answers /readyz 200 (a default install crash-looped on the chart's own
    access conditions while lint and template passed). Only what cannot exist here is swapped:
    the cluster's database (SQLite), its Kafka (the test's broker), the paths and ports."""
    from lucid_hub.demo.ports import free_port
    from lucid_hub.demo.processes import HubProcess, wait_until

    values = {"database": {"url": "postgresql+psycopg://lucid@db/lucid"}} if profile == "defaults" else PROFILES[profile]
    objects = render(values)
    (config,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "acme-lucid-hub"]
    container = _hub_container(objects)
    assert container["args"] == ["serve"]
    env = {k: str(v) for k, v in config["data"].items() if k.startswith("LUCID_")}
    env.update({e["name"]: str(e["value"]) for e in container.get("env", []) if "value" in e})
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "policies.ttl").write_text(config["data"]["policies.ttl"])
    env.update({"LUCID_DATA_DIR": str(tmp_path / "data"), "LUCID_POLICIES_DIR": str(policies),
                "LUCID_HOST": "127.0.0.1", "LUCID_LOG_FORMAT": "text",
                "LUCID_DATABASE_URL": f"sqlite:///{tmp_path / 'hub.db'}", "LUCID_METRICS_PORT": str(free_port())})
    if "LUCID_KAFKA_BOOTSTRAP" in env:
        env["LUCID_KAFKA_BOOTSTRAP"] = kafka_bootstrap
    with HubProcess(profile, tmp_path / "data", env) as hub:
        wait_until(lambda: hub.http.get(f"{hub.url}/readyz", timeout=10).status_code == 200, 60,
                   f"the {profile} hub ready", explain=lambda: hub.log_tail())
        conditions = hub.call("GET", "/admin/conditions").json()["conditions"]
        assert "urn:lucid-hub:conditions:admins-write-all" in {c["iri"] for c in conditions}
        assert hub.publish("https://acme.example/graphs/kpi", "<urn:s> <urn:p> 1 .")  # the chart's admins may write


def test_kafka_security_comes_from_the_operators_secrets_never_the_config_map() -> None:
    objects = render(PROFILES["kafka-secured"])
    (config,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "acme-lucid-hub"]
    assert not [k for k in config["data"] if "PASSWORD" in k or "SECRET" in k]
    for workload in (_hub_container(objects), _containers(_by(objects, "Deployment", "worker")[0])[0]):
        env = {e["name"]: e for e in workload["env"]}
        assert env["LUCID_KAFKA_SASL_PASSWORD"]["valueFrom"] == {"secretKeyRef": {"name": "kafka-sasl",
                                                                                  "key": "password"}}
        assert env["LUCID_KAFKA_SSL_CA_FILE"]["value"] == "/etc/lucid-hub/kafka/tls/ca.crt"
        assert {"name": "kafka-tls", "mountPath": "/etc/lucid-hub/kafka/tls", "readOnly": True} in \
            workload["volumeMounts"]
    with pytest.raises(helm.HelmError, match="mechanism"):
        render({**PROFILES["minimal"], "kafka": {"bootstrap": "k:9092", "sasl": {"mechanism": "GSSAPI"}}})
    with pytest.raises(helm.HelmError, match=r"kafka\.oauth\.clientId is required"):
        render({**PROFILES["minimal"], "kafka": {"bootstrap": "k:9092", "oauth": {"tokenUrl": "https://id/token"}}})
    with pytest.raises(helm.HelmError, match=r"secrityProtocol|additional"):
        render({**PROFILES["minimal"], "kafka": {"bootstrap": "k:9092", "secrityProtocol": "SSL"}})


@pytest.mark.slow
def test_the_charts_kafka_security_starts_a_hub_against_a_secured_broker(tmp_path: Path) -> None:
    """The chart's Kafka values, rendered, start a real hub against a broker behind TLS (stunnel4,
    client certificate) and SASL SCRAM-SHA-512 (tests/secured_kafka.py): the mounted Secret's
    files and the password's secretKeyRef are given as the cluster would give them."""
    import shutil

    from lucid_hub.demo.ports import free_port
    from lucid_hub.demo.processes import HubProcess, wait_until
    from tests.secured_kafka import secured_kafka, stunnel_binary

    if stunnel_binary() is None:
        pytest.skip("Debian's stunnel4 is not installed: apt-get install stunnel4")
    password = "chart secret"
    with secured_kafka(tmp_path / "kafka", tls=True, sasl_users={"acme": password}) as (bootstrap, certs, front):
        objects = render(PROFILES["kafka-secured"])
        (config,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "acme-lucid-hub"]
        container = _hub_container(objects)
        mounted = tmp_path / "etc-kafka-tls"  # the Secret kafka-ca as its volume holds it
        mounted.mkdir()
        for key, source in (("ca.crt", certs.ca), ("tls.crt", certs.client_cert), ("tls.key", certs.client_key)):
            shutil.copy(source, mounted / key)
        env = {k: str(v) for k, v in config["data"].items() if k.startswith("LUCID_")}
        env.update({e["name"]: str(e["value"]).replace("/etc/lucid-hub/kafka/tls", str(mounted))
                    for e in container["env"] if "value" in e})
        env.update({"LUCID_KAFKA_SASL_PASSWORD": password, "LUCID_KAFKA_BOOTSTRAP": bootstrap,
                    "LUCID_DATA_DIR": str(tmp_path / "data"), "LUCID_HOST": "127.0.0.1", "LUCID_LOG_FORMAT": "text",
                    "LUCID_DATABASE_URL": f"sqlite:///{tmp_path / 'hub.db'}", "LUCID_METRICS_PORT": str(free_port()),
                    "LUCID_POLICIES_DIR": str(tmp_path / "policies")})
        (tmp_path / "policies").mkdir()
        (tmp_path / "policies" / "policies.ttl").write_text(config["data"]["policies.ttl"])
        with HubProcess("kafka-secured", tmp_path / "data", env) as hub:
            wait_until(lambda: hub.http.get(f"{hub.url}/readyz", timeout=10).status_code == 200, 60,
                       "the hub ready through the secured Kafka", explain=lambda: hub.log_tail())
            assert hub.publish("https://acme.example/graphs/kpi", "<urn:s> <urn:p> 1 .")
            wait_until(lambda: ("SCRAM-SHA-512", "acme") in front.authenticated, 30, "SCRAM authentication")
            assert password not in hub.log_tail()



def test_the_kafka_values_in_the_operations_guide_render_valid_objects() -> None:
    import re

    text = (CHART.parents[1] / "docs" / "operations.md").read_text(encoding="utf-8")
    block = re.search(r"```yaml kafka-values\n(.*?)```", text, re.S)
    assert block is not None
    examples = [doc for doc in yaml.safe_load_all(block.group(1)) if doc]
    assert len(examples) == 3
    for example in examples:
        objects = render({**PROFILES["minimal"], **example})
        for obj in objects:
            validate(obj)
        env = {e["name"] for e in _hub_container(objects)["env"]}
        assert "LUCID_KAFKA_SECURITY_PROTOCOL" in env or "LUCID_KAFKA_PROPERTIES_FILE" in env


def test_postgresql_by_its_parts_takes_the_password_and_ca_from_the_operators_secrets() -> None:
    values = {"database": {"host": "acme.postgres.database.azure.com", "port": 6432, "name": "hub", "user": "acme",
                           "existingSecret": "acme-db", "existingSecretPasswordKey": "pg-password",
                           "sslmode": "verify-full", "sslRootCert": {"existingSecret": "azure-ca", "key": "root.pem"}}}
    objects = render(values)
    for obj in objects:
        validate(obj)
    assert "Secret" not in {o["kind"] for o in objects}  # nothing of the database's in the chart's own objects
    migrate = _containers(_by(objects, "Job")[0])[0]
    for container in (_hub_container(objects), _containers(_by(objects, "Deployment", "worker")[0])[0], migrate):
        env = {e["name"]: e for e in container["env"]}
        assert "LUCID_DATABASE_URL" not in env
        assert {k: env[k].get("value") for k in ("LUCID_DATABASE_HOST", "LUCID_DATABASE_PORT", "LUCID_DATABASE_NAME",
                                                  "LUCID_DATABASE_USER", "LUCID_DATABASE_SSLMODE",
                                                  "LUCID_DATABASE_SSLROOTCERT")} == {
            "LUCID_DATABASE_HOST": "acme.postgres.database.azure.com", "LUCID_DATABASE_PORT": "6432",
            "LUCID_DATABASE_NAME": "hub", "LUCID_DATABASE_USER": "acme", "LUCID_DATABASE_SSLMODE": "verify-full",
            "LUCID_DATABASE_SSLROOTCERT": "/etc/lucid-hub/database/root.pem"}
        assert env["LUCID_DATABASE_PASSWORD"]["valueFrom"] == {"secretKeyRef": {"name": "acme-db",
                                                                               "key": "pg-password"}}
        assert {"name": "database-ca", "mountPath": "/etc/lucid-hub/database", "readOnly": True} in \
            container["volumeMounts"]
    url_key = render({"database": {"existingSecret": "acme-db", "existingSecretUrlKey": "uri"}})
    (env,) = [e for e in _hub_container(url_key)["env"] if e["name"] == "LUCID_DATABASE_URL"]
    assert env["valueFrom"]["secretKeyRef"] == {"name": "acme-db", "key": "uri"}


def test_misspelt_keys_wrong_types_and_sqlite_are_refused_with_the_reason() -> None:
    base = PROFILES["minimal"]
    refusals = {
        "databse": {**base, "databse": {"url": "postgresql+psycopg://x@db/x"}},
        "sslmode": {**base, "database": {"host": "db", "sslmode": "always"}},
        "port": {"database": {"host": "db", "port": "5432x"}},
        "url": {"database": {"url": "sqlite:////data/hub.db"}},
        "not both": {"database": {"url": "postgresql+psycopg://x@db/x", "host": "db"}},
        "replicsa": {**base, "hub": {"replicsa": 3}},
    }
    for reason, values in refusals.items():
        with pytest.raises(helm.HelmError, match=reason):
            render(values)


CONVENTIONS = {
    "database": {"existingSecret": "lucid-db"},
    "global": {"imageRegistry": "registry.acme.example", "imagePullSecrets": [{"name": "acme-registry"}]},
    "image": {"repository": "platform/lucid-hub", "digest": "sha256:" + "ab" * 32},
    "commonLabels": {"team": "data-sharing"},
    "podLabels": {"sidecar.istio.io/inject": "false"},
    "podAnnotations": {"backup.velero.io/backup-volumes": "data"},
    "extraEnvVars": [{"name": "LUCID_LEASE_MAX", "value": "864000"},
                     {"name": "HTTPS_PROXY", "valueFrom": {"secretKeyRef": {"name": "proxy", "key": "url"}}}],
    "extraEnvVarsSecret": "lucid-extra",
    "extraEnvVarsCM": "lucid-extra-settings",
    "extraVolumes": [{"name": "company-ca", "configMap": {"name": "company-ca"}}],
    "extraVolumeMounts": [{"name": "company-ca", "mountPath": "/etc/company-ca", "readOnly": True}],
    # OpenShift assigns the user and group: the chart's are removed (null removes a default in Helm).
    "podSecurityContext": {"runAsUser": None, "runAsGroup": None, "fsGroup": None},
    "ingress": {"enabled": True, "className": "nginx",
                "hosts": [{"host": "hub.acme.example"}, {"host": "partners.acme.example"}],
                "tls": [{"hosts": ["hub.acme.example", "partners.acme.example"], "secretName": "hub-tls"}]},
    "workers": {"autoscaling": {"enabled": True, "minReplicas": 3, "maxReplicas": 12},
                "podDisruptionBudget": {"enabled": True, "minAvailable": 2}},
}


def test_the_chart_follows_the_conventions_operators_know() -> None:
    report = helm.lint(CHART, CONVENTIONS, strict=True, kube_version=f"v{KUBE_VERSION}")
    assert [m for m in report["messages"] if m["severity"] >= 2] + report["errors"] == []
    objects = render(CONVENTIONS)
    for obj in objects:
        validate(obj)
        assert obj["metadata"]["labels"]["team"] == "data-sharing"  # commonLabels on every object
    image = "registry.acme.example/platform/lucid-hub@sha256:" + "ab" * 32
    hub = _by(objects, "Deployment", "hub")[0]
    worker = _by(objects, "Deployment", "worker")[0]
    for workload in (hub, worker):
        pod = workload["spec"]["template"]
        assert pod["metadata"]["labels"]["sidecar.istio.io/inject"] == "false"
        assert pod["metadata"]["annotations"]["backup.velero.io/backup-volumes"] == "data"
        assert pod["spec"]["imagePullSecrets"] == [{"name": "acme-registry"}]
        assert pod["spec"]["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
        (container,) = pod["spec"]["containers"]
        assert container["image"] == image
        assert {"secretRef": {"name": "lucid-extra"}} in container["envFrom"]
        assert {"configMapRef": {"name": "lucid-extra-settings"}} in container["envFrom"]
        env = {e["name"]: e for e in container["env"]}
        assert env["HTTPS_PROXY"]["valueFrom"] == {"secretKeyRef": {"name": "proxy", "key": "url"}}
        assert {"name": "company-ca", "mountPath": "/etc/company-ca", "readOnly": True} in container["volumeMounts"]
        assert {"name": "company-ca", "configMap": {"name": "company-ca"}} in pod["spec"]["volumes"]
        assert container["securityContext"]["readOnlyRootFilesystem"] is True  # the default kept
    assert "replicas" not in worker["spec"]  # the HPA decides
    (hpa,) = [o for o in objects if o["kind"] == "HorizontalPodAutoscaler"]
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (3, 12)
    (pdb,) = [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    assert pdb["spec"]["minAvailable"] == 2
    (ingress,) = [o for o in objects if o["kind"] == "Ingress"]
    assert ingress["spec"]["ingressClassName"] == "nginx"
    assert [r["host"] for r in ingress["spec"]["rules"]] == ["hub.acme.example", "partners.acme.example"]
    assert ingress["spec"]["tls"] == [{"hosts": ["hub.acme.example", "partners.acme.example"], "secretName": "hub-tls"}]
    (migrate,) = _by(objects, "Job")
    assert migrate["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "acme-registry"}]


def test_values_files_of_the_previous_release_render_as_before() -> None:
    """Today's names keep working: a repository that names its registry, the workers'
    top-level autoscaling and disruption budget, Ingress `host` and `tlsSecret`, `extraEnv`."""
    before = {"database": {"existingSecret": "lucid-db"},
              "image": {"repository": "registry.acme.example/lucid-hub", "tag": "0.2.0"},
              "ingress": {"enabled": True, "host": "hub.acme.example", "tlsSecret": "hub-tls"},
              "autoscaling": {"enabled": True, "minReplicas": 2, "maxReplicas": 5},
              "podDisruptionBudget": {"enabled": True, "minAvailable": 1}, "extraEnv": {"LUCID_LEASE_MAX": "864000"}}
    objects = render(before)
    for obj in objects:
        validate(obj)
    assert _hub_container(objects)["image"] == "registry.acme.example/lucid-hub:0.2.0"
    (ingress,) = [o for o in objects if o["kind"] == "Ingress"]
    assert ingress["spec"]["rules"][0]["host"] == "hub.acme.example"
    assert ingress["spec"]["tls"] == [{"hosts": ["hub.acme.example"], "secretName": "hub-tls"}]
    (hpa,) = [o for o in objects if o["kind"] == "HorizontalPodAutoscaler"]
    assert (hpa["spec"]["minReplicas"], hpa["spec"]["maxReplicas"]) == (2, 5)
    assert _by(objects, "ConfigMap")[0]["data"]["LUCID_LEASE_MAX"] == "864000"
    assert _hub_container(render(PROFILES["minimal"]))["image"] == "ghcr.io/lucid-hub/lucid-hub:0.1.0"


def test_the_alerts_and_the_dashboard_use_metrics_the_hub_exports() -> None:
    """Each alert's and panel's metric names are ones lucid-hub exports (a renamed metric would
    silently never fire); the rule and the dashboard render only when asked for."""
    import json
    import re

    objects = render(PROFILES["production"])
    (rule,) = [o for o in objects if o["kind"] == "PrometheusRule"]
    (board,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"].endswith("-dashboard")]
    assert board["metadata"]["labels"]["grafana_dashboard"] == "1"
    panels = json.loads(board["data"]["lucid-hub.json"])["panels"]
    exprs = [r["expr"] for g in rule["spec"]["groups"] for r in g["rules"]] + [
        t["expr"] for p in panels for t in p["targets"]]
    source = "\n".join(p.read_text(encoding="utf-8") for p in (CHART.parents[1] / "lucid_hub").rglob("*.py"))
    from lucid_hub.metrics import mirror_metrics

    exported = set(re.findall(r'"(lucid_[a-z_]+)"', source)) | {family.name for family in mirror_metrics([])}
    for expr in exprs:
        for name in re.findall(r"\b(lucid_[a-z_]+)", expr):
            base = re.sub(r"_(total|bucket|sum|count)$", "", name)
            assert name in exported or base in exported, (name, expr)
    alerts = {r["alert"] for g in rule["spec"]["groups"] for r in g["rules"]}
    assert {"LucidHubSubscriberBehind", "LucidHubMirrorQuarantined", "LucidHubRelayStalled", "LucidHubNoLeader"} <= alerts
    assert not [o for o in render(PROFILES["minimal"]) if o["kind"] == "PrometheusRule"]


def test_the_hubs_disruption_budget_is_named_like_its_autoscaling() -> None:
    replicated = {k: v for k, v in PROFILES["replicated"].items() if k != "podDisruptionBudget"}
    assert not [o for o in render(replicated) if o["kind"] == "PodDisruptionBudget"]
    objects = render({**replicated, "hub": {**replicated["hub"], "podDisruptionBudget": {"enabled": True}}})
    (budget,) = [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    assert budget["metadata"]["name"] == "acme-lucid-hub-hub" and budget["spec"]["maxUnavailable"] == 1


def test_the_operators_triple_store_is_configured_with_credentials_from_its_secret(tmp_path: Path) -> None:
    values = {**PROFILES["minimal"], "store": {
        "queryUrl": "http://virtuoso:8890/sparql", "updateUrl": "http://virtuoso:8890/sparql-auth",
        "blankNodes": "skolem", "captureSeconds": 300,
        "auth": {"scheme": "digest", "user": "lucid", "existingSecret": "virtuoso"},
        "ca": {"existingSecret": "internal-ca"}}}
    objects = render(values)
    (config,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "acme-lucid-hub"]
    assert not [k for k in config["data"] if k.startswith("LUCID_STORE")]
    container = _hub_container(objects)
    env = {e["name"]: e for e in container["env"]}
    assert env["LUCID_STORE_UPDATE_URL"]["value"] == "http://virtuoso:8890/sparql-auth"
    assert env["LUCID_STORE_AUTH"]["value"] == "digest" and env["LUCID_STORE_BLANK_NODES"]["value"] == "skolem"
    assert env["LUCID_STORE_PASSWORD"]["valueFrom"] == {"secretKeyRef": {"name": "virtuoso", "key": "password"}}
    assert env["LUCID_STORE_CA_FILE"]["value"] == "/etc/lucid-hub/store/ca.crt"
    assert {"name": "store-ca", "mountPath": "/etc/lucid-hub/store", "readOnly": True} in container["volumeMounts"]
    # the settings the chart writes are the hub's: they configure a store it accepts
    from lucid_hub.config import Settings
    from lucid_hub.store.remote import RemoteConfig

    (tmp_path / "ca.crt").write_text("")  # the Secret's file, where this machine has it
    given = {k: str(e["value"]) for k, e in env.items() if k.startswith("LUCID_STORE") and "value" in e}
    given["LUCID_STORE_CA_FILE"] = str(tmp_path / "ca.crt")
    config_of = RemoteConfig.of(Settings.from_env({**given, "LUCID_STORE_PASSWORD": "from-the-secret"}))
    assert config_of is not None and config_of.auth == "digest" and config_of.password == "from-the-secret"
    assert "LUCID_STORE_QUERY_URL" not in {e["name"] for e in _hub_container(render(PROFILES["minimal"]))["env"]}
    with pytest.raises(helm.HelmError, match=r"blankNodes|enum"):
        render({**PROFILES["minimal"], "store": {"queryUrl": "http://s/q", "updateUrl": "http://s/u",
                                                  "blankNodes": "pattern"}})
    with pytest.raises(helm.HelmError, match=r"store\.updateUrl is required"):
        render({**PROFILES["minimal"], "store": {"queryUrl": "http://s/q"}})
    with pytest.raises(helm.HelmError, match=r"store\.auth\.existingSecret is required"):
        render({**PROFILES["minimal"], "store": {"queryUrl": "http://s/q", "updateUrl": "http://s/u",
                                                  "auth": {"user": "lucid"}}})
    with pytest.raises(helm.HelmError, match=r"quryUrl|additional"):
        render({**PROFILES["minimal"], "store": {"quryUrl": "http://s/q"}})


def test_mqtt_registration_and_the_default_graph_are_configured_with_secrets_from_secrets() -> None:
    values = {**PROFILES["minimal"], "mqtt": {"url": "mqtt://mosquitto:1883", "user": "hub", "existingSecret": "mqtt"},
              "registration": {"mode": "token", "existingSecret": "dcr", "groups": "partners"},
              "defaultGraph": "https://hub.example.com/graphs/{account}/default"}
    objects = render(values)
    (config,) = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "acme-lucid-hub"]
    assert not [k for k in config["data"] if k.startswith(("LUCID_MQTT", "LUCID_DCR"))]  # not in the ConfigMap
    env = {e["name"]: e for e in _hub_container(objects)["env"]}
    assert env["LUCID_MQTT_URL"]["value"] == "mqtt://mosquitto:1883" and env["LUCID_MQTT_USER"]["value"] == "hub"
    assert env["LUCID_MQTT_PASSWORD"]["valueFrom"] == {"secretKeyRef": {"name": "mqtt", "key": "password"}}
    assert env["LUCID_DCR"]["value"] == "token" and env["LUCID_DCR_GROUPS"]["value"] == "partners"
    assert env["LUCID_DCR_TOKEN"]["valueFrom"] == {"secretKeyRef": {"name": "dcr", "key": "token"}}
    assert env["LUCID_DEFAULT_GRAPH"]["value"] == "https://hub.example.com/graphs/{account}/default"
    # the settings the chart writes are ones the hub accepts
    from lucid_hub.config import Settings

    given = {k: str(e["value"]) for k, e in env.items() if k.startswith(("LUCID_MQTT", "LUCID_DCR", "LUCID_DEFAULT"))
             and "value" in e}
    settings = Settings.from_env({**given, "LUCID_DCR_TOKEN": "from-the-secret-0123456789"})
    assert settings.dcr == "token" and settings.default_graph_for("lc-1") == "https://hub.example.com/graphs/lc-1/default"
    plain = {e["name"] for e in _hub_container(render(PROFILES["minimal"]))["env"]}
    assert not plain & {"LUCID_MQTT_URL", "LUCID_DCR", "LUCID_DEFAULT_GRAPH"}
    with pytest.raises(helm.HelmError, match=r"mode|enum"):
        render({**PROFILES["minimal"], "registration": {"mode": "anyone"}})
    with pytest.raises(helm.HelmError, match=r"registration\.existingSecret is required"):
        render({**PROFILES["minimal"], "registration": {"mode": "token"}})
    with pytest.raises(helm.HelmError, match=r"mqtt\.existingSecret is required"):
        render({**PROFILES["minimal"], "mqtt": {"url": "mqtt://m:1883", "user": "hub"}})
    with pytest.raises(helm.HelmError, match=r"url|pattern"):
        render({**PROFILES["minimal"], "mqtt": {"url": "http://m:1883"}})
