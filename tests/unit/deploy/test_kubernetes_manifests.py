"""deploy/kubernetes/base/ validated offline: every built-in kind against Kubernetes 1.30's
schemas (kubernetes-validate, strict: no unknown field), the custom kinds' shape
(manifests.py), and the references between the manifests (selectors, named ports, the
autoscaler's metric and the series it comes from, a grace period that covers the drain).
The overlays and their committed rendering: test_kustomize.py."""

from __future__ import annotations

import re

import kubernetes_validate
import pytest
import yaml

from tests.unit.deploy.manifests import NAME, base_documents, validate
from triton_backend.metric_catalog import LATENCY_HISTOGRAMS, PREFIX
from triton_backend.model_settings import SHUTDOWN_DRAIN_S

BASE_DOCS = base_documents()
DOCS = {d["kind"]: d for d in BASE_DOCS if d["kind"] != "Service"}
SERVICES = {d["metadata"]["name"]: d for d in BASE_DOCS if d["kind"] == "Service"}


def test_every_piece_is_there():
    assert [d["kind"] for d in BASE_DOCS].count("Service") == 2
    assert set(DOCS) == {"Deployment", "PodMonitor", "PrometheusRule", "ConfigMap",
                         "HorizontalPodAutoscaler", "PodDisruptionBudget", "NetworkPolicy"}


@pytest.mark.parametrize("doc", BASE_DOCS, ids=lambda d: f"{d['kind']}/{d['metadata']['name']}")
def test_every_document_validates(doc):
    validate(doc)


def test_a_misspelt_field_is_caught():
    broken = yaml.safe_load(yaml.safe_dump(DOCS["Deployment"]))
    broken["spec"]["template"]["spec"]["containers"][0]["readinesProbe"] = \
        broken["spec"]["template"]["spec"]["containers"][0].pop("readinessProbe")
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(broken)


def _pod() -> dict:
    return DOCS["Deployment"]["spec"]["template"]


def _container() -> dict:
    (container,) = _pod()["spec"]["containers"]
    return container


def test_selectors_name_the_pods():
    assert _pod()["metadata"]["labels"] == NAME
    assert DOCS["Deployment"]["spec"]["selector"]["matchLabels"] == NAME
    for service in SERVICES.values():
        assert service["spec"]["selector"] == NAME
    assert DOCS["PodMonitor"]["spec"]["selector"]["matchLabels"] == NAME
    assert DOCS["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"] == NAME
    target = DOCS["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]
    assert (target["kind"], target["name"]) == ("Deployment", DOCS["Deployment"]["metadata"]["name"])


def test_probes_and_ports_are_tritons():
    ports = {p["name"]: p["containerPort"] for p in _container()["ports"]}
    assert ports == {"http": 8000, "grpc": 8001, "metrics": 8002}
    # Ready: the plugin model's own endpoint; live: the model answers (server_ops.probe,
    # tests/integration/test_probe.py), since Triton keeps a model with a dead stub ready.
    ready = _container()["readinessProbe"]["httpGet"]
    model = re.fullmatch(r"/v2/models/(\w+)/ready", ready["path"]).group(1)
    assert ready["port"] == "http"
    live = _container()["livenessProbe"]
    command = live["exec"]["command"]
    assert command[1:3] == ["-m", "server_ops.probe"]
    assert command[command.index("--model") + 1] == model
    probe_timeout = float(command[command.index("--timeout-s") + 1])
    assert live["timeoutSeconds"] > probe_timeout
    assert live["periodSeconds"] * live["failureThreshold"] <= 10
    # HTTP through the ClusterIP Service, gRPC only through the headless one (balanced per
    # request by the client); the metrics port is scraped on the pods, offered by neither.
    offered = {name: {p["targetPort"] for p in s["spec"]["ports"]}
               for name, s in SERVICES.items()}
    assert offered == {"triton-explicit": {"http"}, "triton-explicit-grpc": {"grpc"}}
    assert "clusterIP" not in SERVICES["triton-explicit"]["spec"]
    assert SERVICES["triton-explicit-grpc"]["spec"]["clusterIP"] == "None"
    (endpoint,) = DOCS["PodMonitor"]["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] == "metrics" and endpoint["path"] == "/metrics"


def test_the_grace_period_covers_the_pre_stop_the_drain_and_tritons_exit_timeout():
    exit_timeout = next(int(a.split("=", 1)[1]) for a in _container()["args"]
                        if a.startswith("--exit-timeout-secs="))
    pre_stop = int(_container()["lifecycle"]["preStop"]["exec"]["command"][-1])
    assert SHUTDOWN_DRAIN_S <= exit_timeout
    assert _pod()["spec"]["terminationGracePeriodSeconds"] >= pre_stop + exit_timeout


def test_the_autoscaler_reads_the_metric_the_adapter_makes_from_the_queue_wait():
    (metric,) = DOCS["HorizontalPodAutoscaler"]["spec"]["metrics"]
    rules = yaml.safe_load(DOCS["ConfigMap"]["data"]["config.yaml"])["rules"]
    (rule,) = rules
    assert rule["name"]["as"] == metric["pods"]["metric"]["name"]
    series = re.match(r"(\w+)\{", rule["seriesQuery"]).group(1)
    assert series == f"{PREFIX}queue_duration_seconds_count"
    assert "queue_duration_seconds" in LATENCY_HISTOGRAMS
    # The adapter fills these per request; the query itself is run by
    # test_prometheus_rules.py.
    assert "<<.LabelMatchers>>" in rule["metricsQuery"] and "<<.GroupBy>>" in rule["metricsQuery"]
    assert metric["pods"]["target"]["type"] == "AverageValue"


def _every_container() -> list[dict]:
    spec = _pod()["spec"]
    return [*spec.get("initContainers", []), *spec["containers"]]


def test_nothing_runs_as_root_or_with_more_than_it_needs():
    pod = _pod()["spec"]["securityContext"]
    assert pod["runAsNonRoot"] is True and pod["runAsUser"] != 0
    assert pod["seccompProfile"] == {"type": "RuntimeDefault"}
    for container in _every_container():
        ctx = container["securityContext"]
        assert ctx["allowPrivilegeEscalation"] is False, container["name"]
        assert ctx["capabilities"]["drop"] == ["ALL"], container["name"]
        assert ctx["readOnlyRootFilesystem"] is True, container["name"]


def test_every_container_has_guaranteed_cpu_and_memory():
    for container in _every_container():
        resources = container["resources"]
        for kind in ("cpu", "memory"):
            assert resources["requests"][kind] == resources["limits"][kind], \
                (container["name"], kind)


def test_dev_shm_is_memory_backed_and_what_triton_writes_is_writable():
    """The read-only root's writable places: what strace saw Triton and the plugin write
    (docs/scale-out.md)."""
    volumes = {v["name"]: v for v in _pod()["spec"]["volumes"]}
    mounts = {m["mountPath"]: m["name"] for m in _container()["volumeMounts"]}
    shm = volumes[mounts["/dev/shm"]]["emptyDir"]
    assert shm["medium"] == "Memory" and shm["sizeLimit"]
    for path in ("/tmp", "/var/log", "/models"):
        assert "emptyDir" in volumes[mounts[path]], path


def test_the_network_policy_admits_inference_and_the_scrape_only():
    policy = DOCS["NetworkPolicy"]["spec"]
    assert policy["podSelector"]["matchLabels"] == NAME
    assert policy["policyTypes"] == ["Ingress"]
    allowed = [{p["port"] for p in rule["ports"]} for rule in policy["ingress"]]
    assert allowed == [{"http", "grpc"}, {"metrics"}]
    ports = {p["name"] for p in _container()["ports"]}
    assert set().union(*allowed) == ports
