"""The gateway deployment (deploy/kubernetes/gateway/) and compose's PostgreSQL profile. Every
manifest is validated against the Kubernetes schemas in tests/test_deploy.py; these are the
rules the schemas cannot see: the pieces select the same pods, ports and names agree, the HPA
and the PDB leave room to drain, the settings come from the config file in the ConfigMap and
the secrets from the Secret, the network policy lets exactly the gateway's traffic through."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

import pytest

from spillguard.incident_store import is_postgres
from spillguard.settings import Settings
from tests.test_deploy import (
    DEPLOY,
    K8S,
    SETTINGS_ENV,
    _compose,
    _compose_schema,
    _duration,
    _validator,
    check_config_file,
    check_security_context,
    env_file,
    k8s_docs,
    mounted_config,
    quantity,
    settings_from_env,
)

GATEWAY = K8S / "gateway"
DB_URL = "postgresql://spillguard:pw@postgres.db.svc:5432/spillguard"


def docs() -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    for _, doc in k8s_docs(GATEWAY):
        assert doc["kind"] not in found, f"two {doc['kind']}s"
        found[doc["kind"]] = doc
    return found


def pod() -> dict[str, Any]:
    spec: dict[str, Any] = docs()["Deployment"]["spec"]["template"]["spec"]
    return spec


def container() -> dict[str, Any]:
    (found,) = pod()["containers"]
    assert found["name"] == "spillguard"  # deploy/prometheus-kubernetes.yml keeps this name
    return found


def labels() -> dict[str, str]:
    found: dict[str, str] = docs()["Deployment"]["spec"]["template"]["metadata"]["labels"]
    return found


def port(ref: int | str) -> int:
    for p in container()["ports"]:
        if ref in (p["name"], p["containerPort"]):
            return int(p["containerPort"])
    raise AssertionError(f"no container port {ref!r}")


def env() -> dict[str, str]:
    """The container's environment as the pod gets it: its values, then the Secret's keys
    (their placeholders, the database URL a real one's shape)."""
    c, secret = container(), docs()["Secret"]
    assert "envFrom" not in c, "settings come from the config file, secrets from the Secret"
    out: dict[str, str] = {}
    for item in c["env"]:
        if "value" in item:
            out[item["name"]] = item["value"]
            continue
        ref = item["valueFrom"]["secretKeyRef"]
        assert ref["name"] == secret["metadata"]["name"]
        value = secret["stringData"][ref["key"]]
        out[item["name"]] = DB_URL if item["name"] == "SPILLGUARD_INCIDENTS_DB" else value
    return out


def settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Settings:
    """What a replica runs with: the ConfigMap's file beside its environment."""
    _, text = mounted_config(pod(), container(), list(docs().values()))
    secret_env = {i["name"] for i in container()["env"] if "valueFrom" in i}
    return check_config_file(monkeypatch, tmp_path, text, env(), secret_env)


def test_the_gateway_has_every_piece() -> None:
    kinds = set(docs())
    assert kinds == {
        "ConfigMap",
        "Secret",
        "Deployment",
        "Service",
        "HorizontalPodAutoscaler",
        "PodDisruptionBudget",
        "NetworkPolicy",
    }
    for doc in docs().values():
        assert doc["metadata"]["labels"].items() <= labels().items(), doc["kind"]


def test_every_piece_selects_the_gateways_pods() -> None:
    found = docs()
    deployment = found["Deployment"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels().items()
    assert found["Service"]["spec"]["selector"].items() <= labels().items()
    assert (
        found["PodDisruptionBudget"]["spec"]["selector"]["matchLabels"].items() <= labels().items()
    )
    assert found["NetworkPolicy"]["spec"]["podSelector"]["matchLabels"].items() <= labels().items()
    target = found["HorizontalPodAutoscaler"]["spec"]["scaleTargetRef"]
    assert (target["apiVersion"], target["kind"]) == (deployment["apiVersion"], "Deployment")
    assert target["name"] == deployment["metadata"]["name"]


def test_settings_come_from_the_configmap_and_secrets_from_the_secret(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert set(docs()["ConfigMap"]["data"]) == {"spillguard.toml"}
    secrets = {"SPILLGUARD_UPSTREAM_KEY", "SPILLGUARD_PROXY_KEYS", "SPILLGUARD_INCIDENTS_DB"}
    for item in container()["env"]:
        assert item["name"] in SETTINGS_ENV or "valueFrom" in item, item["name"]
        if item["name"] in secrets or item["name"].endswith("_KEY"):
            assert "value" not in item, f"{item['name']} given in clear"
    for key, value in docs()["Secret"]["stringData"].items():
        assert value.startswith("REPLACE_WITH_"), f"{key}: not a placeholder"
    s = settings(monkeypatch, tmp_path)
    assert is_postgres(s.incidents_db), "the replicas must share one store"
    assert s.upstream_key is not None and s.proxy_keys
    assert s.host == "0.0.0.0" and s.port == port("http")
    assert s.workers == 1, "the HPA scales pods; workers would hide load from it"
    assert s.incident_retention and s.incident_max_rows
    assert "xai" in s.upstreams and s.upstreams["xai"].key is not None
    assert [r.model for r in s.rules] == ["grok-*"]


def test_the_configmaps_file_is_what_spillguard_reads(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from_env = settings_from_env(
        monkeypatch, {k: v for k, v in env().items() if k != "SPILLGUARD_CONFIG"}
    )
    from_file = settings(monkeypatch, tmp_path)
    assert from_file.max_concurrency == 256 != from_env.max_concurrency  # from the file


def test_replicas_scale_and_drain_safely() -> None:
    found = docs()
    hpa = found["HorizontalPodAutoscaler"]["spec"]
    replicas = found["Deployment"]["spec"]["replicas"]
    assert 2 <= hpa["minReplicas"] == replicas <= hpa["maxReplicas"]
    pdb = found["PodDisruptionBudget"]["spec"]
    # A drain can always go on: the budget leaves at least one replica free to move.
    if "maxUnavailable" in pdb:
        assert 1 <= int(pdb["maxUnavailable"]) < hpa["minReplicas"]
    else:
        assert int(pdb["minAvailable"]) < hpa["minReplicas"]
    strategy = found["Deployment"]["spec"]["strategy"]["rollingUpdate"]
    assert strategy["maxUnavailable"] == 0, "a rollout would take capacity away"
    # The HPA scales on CPU against a request that is there.
    [metric] = hpa["metrics"]
    assert metric["resource"]["name"] == "cpu"
    res = container()["resources"]
    for kind in ("cpu", "memory"):
        assert quantity(res["requests"][kind]) <= quantity(res["limits"][kind])


def test_probes_grace_and_the_pause_before_stopping(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    c = container()
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert c[probe]["httpGet"]["path"] == path
        assert port(c[probe]["httpGet"]["port"]) == int(env()["SPILLGUARD_PORT"])
    pause = c["lifecycle"]["preStop"]["exec"]["command"]
    assert pause[0] == "sleep"
    grace = settings(monkeypatch, tmp_path).graceful_timeout
    assert pod()["terminationGracePeriodSeconds"] > float(pause[1]) + grace
    assert pod()["enableServiceLinks"] is False


def test_security_context_and_a_writable_tmp_only() -> None:
    check_security_context(pod(), container())
    mounts = container()["volumeMounts"]
    writable = {m["mountPath"]: m["name"] for m in mounts if not m.get("readOnly")}
    assert set(writable) == {"/tmp"}, "the incident record is in PostgreSQL: nothing else to write"
    volumes = {v["name"]: v for v in pod()["volumes"]}
    assert set(volumes) == {m["name"] for m in mounts}
    assert "emptyDir" in volumes[writable["/tmp"]]
    assert all("configMap" in v for name, v in volumes.items() if name != writable["/tmp"])


def test_the_service_and_the_scrape_annotations() -> None:
    service = docs()["Service"]["spec"]
    [p] = service["ports"]
    assert port(p["targetPort"]) == int(env()["SPILLGUARD_PORT"])
    notes = docs()["Deployment"]["spec"]["template"]["metadata"]["annotations"]
    assert notes["prometheus.io/scrape"] == "true" and notes["prometheus.io/path"] == "/metrics"
    assert port(int(notes["prometheus.io/port"])) == int(env()["SPILLGUARD_PORT"])


def test_the_network_policy_lets_through_exactly_the_gateways_traffic() -> None:
    policy = docs()["NetworkPolicy"]["spec"]
    assert set(policy["policyTypes"]) == {"Ingress", "Egress"}
    [ingress] = policy["ingress"]
    assert [port(p["port"]) for p in ingress["ports"]] == [int(env()["SPILLGUARD_PORT"])]
    assert all(source for source in ingress["from"]), "an empty peer lets everyone in"
    out = {(p["port"], p["protocol"]) for rule in policy["egress"] for p in rule["ports"]}
    assert out == {(53, "UDP"), (53, "TCP"), (5432, "TCP"), (443, "TCP")}
    https = [r for r in policy["egress"] if {p["port"] for p in r["ports"]} == {443}]
    [block] = [peer["ipBlock"] for rule in https for peer in rule["to"]]
    # The upstream is outside the cluster: private ranges stay closed on 443.
    for private in ("10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"):
        assert any(
            ipaddress.ip_network(private).subnet_of(ipaddress.ip_network(e))
            for e in block["except"]
        )


# ---- compose's PostgreSQL profile --------------------------------------------------------------


def test_compose_has_a_postgres_profile() -> None:
    compose = _compose()
    errors = list(_validator(_compose_schema()).iter_errors(compose))
    assert not errors
    pg = compose["services"]["postgres"]
    assert pg["profiles"] == ["postgres"]
    assert pg["image"].startswith("postgres:") and ":latest" not in pg["image"]
    test = pg["healthcheck"]["test"]
    assert test[0] == "CMD" and test[1] == "pg_isready"
    (env_name,) = pg["env_file"]
    example = env_file(DEPLOY / f"{env_name}.example")
    assert example == {"POSTGRES_PASSWORD": ""}, "no password in the example"
    assert env_name in (DEPLOY / ".gitignore").read_text().split()
    volume = {v.split(":")[1]: v.split(":")[0] for v in pg["volumes"]}
    assert volume["/var/lib/postgresql/data"] in compose["volumes"]
    assert _duration(pg["stop_grace_period"]) >= 10


def test_the_compose_url_names_the_compose_database(monkeypatch: pytest.MonkeyPatch) -> None:
    """The commented URL in spillguard.env.example is the profile's database, and a setting."""
    pg = _compose()["services"]["postgres"]["environment"]
    text = (DEPLOY / "spillguard.env.example").read_text()
    [line] = [x for x in text.splitlines() if "SPILLGUARD_INCIDENTS_DB=postgresql://" in x]
    url = line.lstrip("# ").split("=", 1)[1]
    user, db = pg["POSTGRES_USER"], pg["POSTGRES_DB"]
    assert url.startswith(f"postgresql://{user}:") and url.endswith(f"@postgres:5432/{db}")
    settings = settings_from_env(monkeypatch, {"SPILLGUARD_INCIDENTS_DB": url})
    assert is_postgres(settings.incidents_db)
