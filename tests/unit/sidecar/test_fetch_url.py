"""What the sidecar fetches (``sidecar.triton_metrics.fetch_url``): http(s) only, straight
from the host whatever proxies the environment names, and a redirect only to the same host.
A real HTTP server on 127.0.0.1 (conftest.py) answers."""

from __future__ import annotations

import pytest

from sidecar.triton_metrics import UnsafeURL, fetch_url

PROXY_VARIABLES = ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy",
                   "ALL_PROXY")


@pytest.mark.parametrize("url", ["file:///etc/hostname", "ftp://127.0.0.1/metrics",
                                 "data:text/plain,nv_inference_count 1", "/metrics"])
def test_a_url_that_is_not_http_is_refused_naming_its_scheme(url):
    with pytest.raises(UnsafeURL, match="scheme"):
        fetch_url(url, 1.0)


def test_the_environments_proxies_are_not_used(local_server, real_page, monkeypatch):
    """Every proxy variable points at a closed port: a fetch through it would fail."""
    for name in PROXY_VARIABLES:
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    local_server.state.body = real_page

    assert fetch_url(local_server.url, 5.0) == real_page
    assert local_server.state.hits == 1


def test_a_redirect_to_another_host_is_refused(local_server, real_page):
    local_server.state.body = real_page
    port = local_server.url.split(":")[2].split("/")[0]
    local_server.state.location = f"http://127.0.0.2:{port}/elsewhere"

    with pytest.raises(UnsafeURL, match="another host"):
        fetch_url(local_server.url, 5.0)
    assert local_server.state.hits == 1  # the redirect itself, not its target


def test_a_redirect_on_the_same_host_is_followed(local_server, real_page):
    local_server.state.body = real_page
    local_server.state.location = local_server.url.replace("/metrics", "/moved")

    assert fetch_url(local_server.url, 5.0) == real_page
    assert local_server.state.hits == 2
