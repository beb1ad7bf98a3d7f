"""deploy/kserve/inferenceservice.yaml: KServe's Triton runtime serving the plugin. No KServe
CRD schema offline: its shape is checked (manifests.py: the model's and the predictor's
container and pod fields strictly, as a Pod), and that it keeps what the base Deployment
keeps (probes on the plugin model, the drain's grace period, /dev/shm, guaranteed QoS)."""

from __future__ import annotations

import os

import kubernetes_validate
import pytest
import yaml

from tests.conftest import REPO_ROOT
from tests.unit.deploy.manifests import base_documents, load_all, validate

(ISVC,) = load_all(os.path.join(REPO_ROOT, "deploy", "kserve", "inferenceservice.yaml"))
MODEL = ISVC["spec"]["predictor"]["model"]


def test_it_validates():
    validate(ISVC)


def test_a_misspelt_container_field_is_caught():
    broken = yaml.safe_load(yaml.safe_dump(ISVC))
    broken["spec"]["predictor"]["model"]["livenesProbe"] = \
        broken["spec"]["predictor"]["model"].pop("livenessProbe")
    with pytest.raises(kubernetes_validate.ValidationError):
        validate(broken)


def test_it_is_the_triton_runtime_with_the_plugin_model():
    assert (ISVC["apiVersion"], ISVC["kind"]) == ("serving.kserve.io/v1beta1", "InferenceService")
    assert MODEL["runtime"] == "kserve-tritonserver" and MODEL["protocolVersion"] == "v2"
    ready = MODEL["readinessProbe"]["httpGet"]["path"]
    live = MODEL["livenessProbe"]["exec"]["command"]
    assert live[1:3] == ["-m", "server_ops.probe"]
    assert ready == f"/v2/models/{live[live.index('--model') + 1]}/ready"
    # The runtime's tritonserver listens for HTTP on 8080.
    assert MODEL["readinessProbe"]["httpGet"]["port"] == 8080
    assert live[live.index("--url") + 1].endswith(":8080")


def test_it_keeps_what_the_base_deployment_keeps():
    (deployment,) = [d for d in base_documents() if d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    predictor = ISVC["spec"]["predictor"]
    assert predictor["terminationGracePeriodSeconds"] == pod["terminationGracePeriodSeconds"]
    assert predictor["securityContext"] == pod["securityContext"]
    shm = {v["name"]: v for v in predictor["volumes"]}[
        {m["mountPath"]: m["name"] for m in MODEL["volumeMounts"]}["/dev/shm"]]
    assert shm["emptyDir"]["medium"] == "Memory"
    assert MODEL["resources"]["requests"] == MODEL["resources"]["limits"]
    assert MODEL["securityContext"]["capabilities"]["drop"] == ["ALL"]
