"""The Kubernetes example under deploy/ is valid, and agrees with what sse-proxy really does.

The manifests are checked against the Kubernetes API schemas shipped by the
``kubernetes-validate`` package (offline, strict: unknown fields fail), then their contents
against the proxy itself: every ``SSE_PROXY_*`` name is a real setting and loads into a
valid :class:`~sse_proxy.settings.Config`, the probes and the scrape annotations point at that
config's admin port and prefix, the NetworkPolicy fences the traffic port and the admin
port apart, and the pod's grace period outlasts the proxy's.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from sse_proxy.config import load_config
from sse_proxy.server.run import admin_url, start_proxy, stop_proxy
from sse_proxy.settings import Config
from tests.support.cli import ROOT

SIDECAR = ROOT / "deploy" / "kubernetes" / "sidecar.yaml"
K8S_VERSIONS = ("1.29.0", "1.33.0")  # native sidecars are on by default from 1.29


def _docs() -> list[dict[str, Any]]:
    docs = [d for d in yaml.safe_load_all(SIDECAR.read_text(encoding="utf-8")) if d]
    assert all(isinstance(d, dict) for d in docs)
    return docs


def _one(kind: str) -> dict[str, Any]:
    found = [d for d in _docs() if d["kind"] == kind]
    assert len(found) == 1, kind
    doc: dict[str, Any] = found[0]
    return doc


def _pod() -> dict[str, Any]:
    pod: dict[str, Any] = _one("Deployment")["spec"]["template"]
    return pod


def _container(name: str) -> dict[str, Any]:
    spec = _pod()["spec"]
    every = [*spec.get("initContainers", []), *spec["containers"]]
    found = [c for c in every if c["name"] == name]
    assert len(found) == 1, name
    container: dict[str, Any] = found[0]
    return container


def _proxy_env() -> dict[str, str]:
    """The sidecar's environment: its ConfigMap's data plus any literal env entries."""
    proxy = _container("sse-proxy")
    env: dict[str, str] = {}
    for source in proxy.get("envFrom", []):
        name = source["configMapRef"]["name"]
        config_map = _one("ConfigMap")
        assert config_map["metadata"]["name"] == name
        env.update(config_map["data"])
    for item in proxy.get("env", []):
        env[item["name"]] = item["value"]
    return env


def _proxy_config() -> Config:
    return load_config(env=_proxy_env())


def test_manifests_parse_and_have_the_expected_kinds() -> None:
    """One ConfigMap, one Deployment, one NetworkPolicy; the proxy sits next to an app."""
    assert sorted(d["kind"] for d in _docs()) == ["ConfigMap", "Deployment", "NetworkPolicy"]
    assert _container("app")["image"]
    assert _container("sse-proxy")["image"].startswith("sse-proxy:")


@pytest.mark.parametrize("version", K8S_VERSIONS)
def test_manifests_validate_against_the_kubernetes_schemas(version: str) -> None:
    """Strict schema validation (kubernetes-validate, offline); unknown fields fail."""
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    for doc in _docs():
        kubernetes_validate.validate(doc, version, strict=True)


def test_the_schema_check_can_fail() -> None:
    """A misspelt field or a wrong type is rejected, so the check above means something."""
    kubernetes_validate = pytest.importorskip("kubernetes_validate")
    deployment = _one("Deployment")
    deployment["spec"]["template"]["spec"]["containers"][0]["imagePullPolicyy"] = "Always"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSIONS[0], strict=True)
    deployment = _one("Deployment")
    deployment["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(deployment, K8S_VERSIONS[0], strict=True)


def test_every_sse_proxy_variable_is_a_real_setting() -> None:
    """SSE_PROXY_<NAME> must name a Config field (a typo would be silently ignored)."""
    names = {f.lower() for f in Config.__dataclass_fields__}
    env = _proxy_env()
    assert env
    for key in env:
        assert key.startswith("SSE_PROXY_"), key
        assert key.removeprefix("SSE_PROXY_").lower() in names, key
    assert "SSE_PROXY_UPSTREAM" in env
    # The app container carries none of the proxy's settings.
    app_env = {e["name"] for e in _container("app").get("env", [])}
    assert not [n for n in app_env if n.startswith("SSE_PROXY_")]


def test_the_config_loads_and_logs_json() -> None:
    """The env is a valid sse-proxy config: JSON logs, the upstream set, loopback-free bind."""
    cfg = _proxy_config()
    assert cfg.upstream.startswith("https://")
    assert cfg.log_format == "json"
    # Probes and scrapes come from outside the pod: the proxy must listen beyond loopback,
    # and then a NetworkPolicy must say who may connect (see below).
    assert cfg.host == "0.0.0.0"


def _resolve_port(container: dict[str, Any], port: int | str) -> int:
    if isinstance(port, int):
        return port
    named = {p["name"]: p["containerPort"] for p in container["ports"]}
    return int(named[port])


def test_probes_hit_the_proxy_health_path_on_its_admin_port() -> None:
    """startup, readiness and liveness probes: GET <admin_prefix>/health on the admin port
    (on the traffic port it is a 404 once an admin port is set)."""
    cfg = _proxy_config()
    assert cfg.admin_port is not None
    assert cfg.admin_port != cfg.port
    proxy = _container("sse-proxy")
    assert [p["containerPort"] for p in proxy["ports"]] == [cfg.port, cfg.admin_port]
    for kind in ("startupProbe", "readinessProbe", "livenessProbe"):
        probe = proxy[kind]["httpGet"]
        assert probe["path"] == f"{cfg.admin_prefix}/health", kind
        assert _resolve_port(proxy, probe["port"]) == cfg.admin_port, kind


def test_prometheus_annotations_point_at_the_metrics_path() -> None:
    """The pod template's scrape annotations name the proxy's admin port and metrics path."""
    cfg = _proxy_config()
    annotations = _pod()["metadata"]["annotations"]
    assert annotations["prometheus.io/scrape"] == "true"
    assert annotations["prometheus.io/port"] == str(cfg.admin_port)
    assert annotations["prometheus.io/path"] == f"{cfg.admin_prefix}/metrics"


@pytest.mark.asyncio
async def test_the_manifests_settings_answer_the_probes_where_they_ask(mock_url: str) -> None:
    """The sidecar's own settings, run for real (on loopback and free ports, in front of the
    mock upstream): the probe path answers 200 on the admin port, 404 on the traffic port,
    and the scrape path answers there with the metrics."""
    cfg = dataclasses.replace(
        _proxy_config(), upstream=mock_url, host="127.0.0.1", port=0, admin_port=0
    )
    proxy = _container("sse-proxy")
    probe = proxy["readinessProbe"]["httpGet"]["path"]
    scrape = _pod()["metadata"]["annotations"]["prometheus.io/path"]
    runner, url = await start_proxy(cfg)
    try:
        admin = admin_url(runner)
        async with aiohttp.ClientSession() as session:
            async with session.get(admin + probe) as resp:
                assert resp.status == 200
            async with session.get(url + probe) as resp:
                assert resp.status == 404
            async with session.get(admin + scrape) as resp:
                assert resp.status == 200
                assert "sse_proxy_workers_live" in await resp.text()
            async with session.get(url + scrape) as resp:
                assert resp.status == 404
    finally:
        await stop_proxy(runner)


def test_app_reaches_the_proxy_on_loopback() -> None:
    """The app's OPENAI_BASE_URL is the sidecar on 127.0.0.1 at the proxy's port, /v1."""
    cfg = _proxy_config()
    env = {e["name"]: e for e in _container("app")["env"]}
    assert env["OPENAI_BASE_URL"]["value"] == f"http://127.0.0.1:{cfg.port}/v1"
    # The API key comes from a Secret, never a literal in the manifest.
    assert "secretKeyRef" in env["OPENAI_API_KEY"]["valueFrom"]


def test_sidecar_is_native_and_the_grace_period_outlasts_the_proxy() -> None:
    """restartPolicy Always (starts first, stops last); pod grace > proxy shutdown grace."""
    cfg = _proxy_config()
    spec = _pod()["spec"]
    assert _container("sse-proxy") in spec["initContainers"]
    assert _container("sse-proxy")["restartPolicy"] == "Always"
    assert spec["terminationGracePeriodSeconds"] > cfg.shutdown_grace + 5


@pytest.mark.parametrize("name", ["sse-proxy", "app"])
def test_containers_are_locked_down(name: str) -> None:
    """Non-root, no privilege escalation, read-only root filesystem, no capabilities."""
    pod_security = _pod()["spec"]["securityContext"]
    assert pod_security["runAsNonRoot"] is True
    assert pod_security["runAsUser"] != 0
    container = _container(name)
    security = container["securityContext"]
    assert security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert security["capabilities"]["drop"] == ["ALL"]
    assert container["resources"]["requests"]
    assert container["resources"]["limits"]["memory"]


def test_read_only_root_leaves_a_writable_tmp_for_workers() -> None:
    """--workers keeps Prometheus multiprocess files in a temp dir: /tmp is an emptyDir."""
    mounts = {m["mountPath"]: m["name"] for m in _container("sse-proxy")["volumeMounts"]}
    volumes = {v["name"]: v for v in _pod()["spec"]["volumes"]}
    assert "emptyDir" in volumes[mounts["/tmp"]]


MONITORING: dict[str, Any] = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}
}
THIS_NAMESPACE: dict[str, Any] = {"podSelector": {}}


def _rules_for(policy: dict[str, Any], port: int) -> list[dict[str, Any]]:
    """The NetworkPolicy's ingress rules that admit ``port`` (a rule without ports admits
    every port)."""
    return [
        rule
        for rule in policy["ingress"]
        if "ports" not in rule or any(p["port"] == port for p in rule["ports"])
    ]


def _assert_fenced(policy: dict[str, Any], cfg: Config) -> None:
    assert cfg.admin_port is not None
    assert policy["policyTypes"] == ["Ingress"]
    traffic = _rules_for(policy, cfg.port)
    admin = _rules_for(policy, cfg.admin_port)
    assert [rule.get("from") for rule in traffic] == [[THIS_NAMESPACE]]
    assert [rule.get("from") for rule in admin] == [[MONITORING]]


def test_network_policy_fences_the_two_ports_apart() -> None:
    """Listening on 0.0.0.0 is fenced, each port to its own clients: the traffic port (it
    spends the API key) to the pods of the app's namespace, the admin port (health and
    metrics, nothing forwarded) to the monitoring namespace; neither to anyone else."""
    policy = _one("NetworkPolicy")["spec"]
    assert policy["podSelector"]["matchLabels"].items() <= _pod()["metadata"]["labels"].items()
    _assert_fenced(policy, _proxy_config())


@pytest.mark.parametrize(
    "extra",
    [
        # the old single-port shape: the monitoring namespace on the traffic port
        {"from": [MONITORING], "ports": [{"port": 8787, "protocol": "TCP"}]},
        # the admin port open to every source
        {"ports": [{"port": 9787, "protocol": "TCP"}]},
        # every port open to this namespace
        {"from": [THIS_NAMESPACE]},
    ],
)
def test_the_fence_check_can_fail(extra: dict[str, Any]) -> None:
    cfg = _proxy_config()
    assert (cfg.port, cfg.admin_port) == (8787, 9787)
    policy = _one("NetworkPolicy")["spec"]
    policy["ingress"].append(extra)
    with pytest.raises(AssertionError):
        _assert_fenced(policy, cfg)


# ------------------------------------------------ prometheus-operator: PodMonitor, rule

KUBERNETES = ROOT / "deploy" / "kubernetes"
PODMONITOR = KUBERNETES / "podmonitor.yaml"
PROMETHEUSRULE = KUBERNETES / "prometheusrule.yaml"
RULES = ROOT / "deploy" / "prometheus" / "sse-proxy-rules.yml"


def _load(path: Path) -> dict[str, Any]:
    (doc,) = [d for d in yaml.safe_load_all(path.read_text(encoding="utf-8")) if d]
    assert isinstance(doc, dict)
    return doc


def _operator_validate(doc: dict[str, Any]) -> None:
    """Validate against prometheus-operator's CRD models (cloudcoil's, generated from the
    CRDs), strictly: a field the CRD does not know is dropped by the model, so the
    document must come back unchanged."""
    models = pytest.importorskip("cloudcoil.models.prometheus_operator.v1")
    assert doc["apiVersion"] == "monitoring.coreos.com/v1"
    model = getattr(models, doc["kind"]).model_validate(doc)
    assert model.model_dump(mode="json", by_alias=True, exclude_unset=True) == doc


@pytest.mark.parametrize("path", [PODMONITOR, PROMETHEUSRULE], ids=lambda p: p.name)
def test_operator_manifests_validate_against_the_crd_models(path: Path) -> None:
    _operator_validate(_load(path))


def test_the_crd_check_can_fail() -> None:
    """A misspelt field, a wrong type or a missing selector is rejected."""
    pydantic = pytest.importorskip("pydantic")
    monitor = _load(PODMONITOR)
    monitor["spec"]["podMetricsEndpoints"][0]["pathh"] = "/metrics"
    with pytest.raises(AssertionError):
        _operator_validate(monitor)
    monitor = _load(PODMONITOR)
    monitor["spec"]["podMetricsEndpoints"][0]["port"] = 8787
    with pytest.raises(pydantic.ValidationError):
        _operator_validate(monitor)
    monitor = _load(PODMONITOR)
    del monitor["spec"]["selector"]
    with pytest.raises(pydantic.ValidationError):
        _operator_validate(monitor)


def test_the_pod_monitor_scrapes_the_sidecars_metrics() -> None:
    """It selects the Deployment's pods, the sidecar's named port, the metrics path."""
    cfg = _proxy_config()
    spec = _load(PODMONITOR)["spec"]
    assert spec["selector"]["matchLabels"].items() <= _pod()["metadata"]["labels"].items()
    (endpoint,) = spec["podMetricsEndpoints"]
    assert cfg.admin_port is not None
    assert _resolve_port(_container("sse-proxy"), endpoint["port"]) == cfg.admin_port
    assert endpoint["path"] == f"{cfg.admin_prefix}/metrics"
    # and the NetworkPolicy lets the monitoring namespace reach that port
    policy = _one("NetworkPolicy")["spec"]
    assert [rule["from"] for rule in _rules_for(policy, cfg.admin_port)] == [[MONITORING]]


def test_the_prometheus_rule_holds_the_plain_files_rules() -> None:
    """The PrometheusRule's groups are deploy/prometheus/sse-proxy-rules.yml's, exactly."""
    plain = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    assert _load(PROMETHEUSRULE)["spec"]["groups"] == plain["groups"]


def test_every_rule_has_a_runbook_in_the_docs() -> None:
    """Each alert's runbook_url is a docs/ page in this repository with that section."""
    import re

    plain = yaml.safe_load(RULES.read_text(encoding="utf-8"))
    rules = [r for g in plain["groups"] for r in g["rules"]]
    assert len(rules) >= 9
    for rule in rules:
        url = rule["annotations"]["runbook_url"]
        page, _, anchor = url.partition("#")
        assert page.startswith("docs/"), url
        text = (ROOT / page).read_text(encoding="utf-8")
        # GitHub's anchor of a heading: lower case, punctuation dropped, spaces to dashes
        anchors = {
            re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
            for h in re.findall(r"^#+ (.+)$", text, re.MULTILINE)
        }
        assert anchor == rule["alert"].lower(), url
        assert anchor in anchors, f"{url}: no such section"
