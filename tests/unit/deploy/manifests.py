"""Reading and validating the Kubernetes documents of deploy/: built-in kinds strictly
against Kubernetes 1.30's schemas (kubernetes-validate: no unknown field), the custom kinds
(no CRD schema offline) for the shape this project relies on."""

from __future__ import annotations

import os

import kubernetes_validate
import yaml

from tests.conftest import REPO_ROOT

KUBERNETES_VERSION = "1.30.0"
KUBERNETES = os.path.join(REPO_ROOT, "deploy", "kubernetes")
BASE = os.path.join(KUBERNETES, "base")
OVERLAYS = os.path.join(KUBERNETES, "overlays")
RENDERED = os.path.join(KUBERNETES, "rendered")
NAME = {"app.kubernetes.io/name": "triton-explicit"}


def load_all(path: str) -> list[dict]:
    with open(path) as fh:
        return [doc for doc in yaml.safe_load_all(fh) if doc is not None]


def base_documents() -> list[dict]:
    """The base's documents, in its kustomization's order."""
    (kustomization,) = load_all(os.path.join(BASE, "kustomization.yaml"))
    return [doc for name in kustomization["resources"]
            for doc in load_all(os.path.join(BASE, name))]


def overlay_names() -> list[str]:
    return sorted(os.listdir(OVERLAYS))


def _check_pod_monitor(doc: dict) -> None:
    spec = doc["spec"]
    assert spec["selector"]["matchLabels"], "a PodMonitor selects pods"
    for endpoint in spec["podMetricsEndpoints"]:
        assert set(endpoint) <= {"port", "path", "interval", "scrapeTimeout"}, endpoint


def _check_prometheus_rule(doc: dict) -> None:
    for group in doc["spec"]["groups"]:
        assert set(group) <= {"name", "interval", "rules"} and group["rules"], group.get("name")
        for rule in group["rules"]:
            assert set(rule) <= {"alert", "record", "expr", "for", "labels", "annotations"}, rule
            assert ("alert" in rule) != ("record" in rule) and rule["expr"], rule


def _check_inference_service(doc: dict) -> None:
    assert set(doc["spec"]) == {"predictor"}
    model = doc["spec"]["predictor"]["model"]
    assert model["modelFormat"]["name"] == "triton" and model["storageUri"]
    # The model is a container: what it carries beyond KServe's own keys must be
    # a Container's fields, checked strictly against the Container schema.
    container = {k: v for k, v in model.items()
                 if k not in {"modelFormat", "runtime", "runtimeVersion", "protocolVersion",
                              "storageUri"}}
    pod = {k: v for k, v in doc["spec"]["predictor"].items()
           if k not in {"model", "minReplicas", "maxReplicas", "scaleMetric", "scaleTarget"}}
    pod["containers"] = [{"name": "kserve-container", **container}]
    kubernetes_validate.validate({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                                  "spec": pod}, KUBERNETES_VERSION, strict=True)


CUSTOM_KINDS = {("monitoring.coreos.com/v1", "PodMonitor"): _check_pod_monitor,
                ("monitoring.coreos.com/v1", "PrometheusRule"): _check_prometheus_rule,
                ("serving.kserve.io/v1beta1", "InferenceService"): _check_inference_service}


def validate(doc: dict) -> None:
    """Raises (kubernetes_validate.ValidationError or AssertionError) on a document that
    is not what its kind allows; a kind neither here nor in Kubernetes's schemas is refused
    (kubernetes_validate.SchemaNotFoundError)."""
    check = CUSTOM_KINDS.get((doc["apiVersion"], doc["kind"]))
    if check is not None:
        check(doc)
    else:
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)
