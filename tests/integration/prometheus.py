"""A real Prometheus (Debian's ``prometheus`` package, /usr/bin/prometheus) for the
integration tests: it scrapes the given targets every second and evaluates the given rule
groups, with its storage in a temporary folder, on a free loopback port."""

from __future__ import annotations

import os
import shutil
import subprocess
import urllib.request

import yaml

from monitoring.queries import PrometheusAPI
from server_ops.ports import free_ports
from tests.eventually import eventually

PROMETHEUS = "/usr/bin/prometheus"
SCRAPE_INTERVAL_S = 1.0


class LivePrometheus:
    """``with LivePrometheus(folder, targets, labels, groups) as api:`` a started, ready
    Prometheus and its HTTP API. ``labels`` are attached to every scraped series, as the
    Prometheus Operator attaches ``namespace`` and ``pod`` to a PodMonitor's."""

    def __init__(self, folder: str, targets: list[str], labels: dict[str, str],
                 rule_groups: list[dict] = ()):
        self.folder = folder
        self.port = free_ports(1)[0]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = os.path.join(folder, "prometheus.log")
        config = {"global": {"scrape_interval": f"{SCRAPE_INTERVAL_S:g}s",
                             "evaluation_interval": f"{SCRAPE_INTERVAL_S:g}s"},
                  "scrape_configs": [{"job_name": "tritonserver",
                                      "static_configs": [{"targets": targets,
                                                          "labels": labels}]}]}
        if rule_groups:
            rules = os.path.join(folder, "rules.yaml")
            with open(rules, "w") as fh:
                yaml.safe_dump({"groups": list(rule_groups)}, fh)
            config["rule_files"] = [rules]
        self.config_path = os.path.join(folder, "prometheus.yml")
        with open(self.config_path, "w") as fh:
            yaml.safe_dump(config, fh)
        self.process: subprocess.Popen | None = None

    def command(self) -> list[str]:
        return [PROMETHEUS, f"--config.file={self.config_path}",
                f"--storage.tsdb.path={os.path.join(self.folder, 'data')}",
                f"--web.listen-address=127.0.0.1:{self.port}"]

    def _ready(self) -> bool:
        assert self.process.poll() is None, f"prometheus exited; see {self.log_path}"
        with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as resp:
            return resp.status == 200

    def __enter__(self) -> PrometheusAPI:
        if not shutil.which(PROMETHEUS):
            raise RuntimeError(f"{PROMETHEUS} missing: Debian's prometheus package "
                               "(run 'make setup')")
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(self.command(), stdout=log,
                                            stderr=subprocess.STDOUT)
        try:
            eventually(self._ready, what=f"prometheus ready on {self.url}")
        except BaseException:
            self.stop()
            raise
        return PrometheusAPI(self.url)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __exit__(self, *exc) -> None:
        self.stop()
