"""The image and the deployment manifests, checked with real validators and no network.

- Kubernetes: kubernetes-validate's bundled (strict) OpenAPI schemas, for the oldest version the
  native sidecar needs and the newest one shipped; then the sidecar's own rules.
- Compose: the compose-spec JSON schema (vendored, with its licence, by check-jsonschema).
- Grafana: every query parsed by a real PromQL parser (promql-parser); metric and label names
  checked against spillguard's metrics; the dashboard's structure against a schema here.
- Prometheus: the scrape configs against a schema here (promtool too, where it is installed).
- Dockerfile: its instructions parsed; its ENTRYPOINT and HEALTHCHECK actually run.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import shutil
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from fnmatch import fnmatch
from importlib.resources import files
from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate.utils as kv
import promql_parser as promql
import pytest
import yaml
from prometheus_client.metrics import MetricWrapperBase

from spillguard.settings import Settings

ROOT = Path(__file__).resolve().parent.parent
DEPLOY = ROOT / "deploy"
K8S = DEPLOY / "kubernetes"
COMPOSE = DEPLOY / "docker-compose.yml"
ENV_EXAMPLE = DEPLOY / "spillguard.env.example"
DASHBOARD = DEPLOY / "grafana" / "spillguard-dashboard.json"
DOCKERFILE = ROOT / "Dockerfile"

# Native sidecars (init containers with restartPolicy: Always) are on by default from 1.29: the
# oldest shipped schema from there on, and the newest.
_SHIPPED = sorted({tuple(map(int, v.split("."))) for v in kv.all_versions()})
K8S_VERSIONS = tuple(
    ".".join(map(str, v)) for v in (min(v for v in _SHIPPED if v >= (1, 29)), _SHIPPED[-1])
)

# spillguard's metrics: name -> (type, labels). Prometheus adds instance and job when scraping.
METRICS: dict[str, tuple[str, frozenset[str]]] = {
    "spillguard_requests_total": ("counter", frozenset({"route", "mode", "outcome", "upstream"})),
    "spillguard_findings_total": ("counter", frozenset({"family", "model", "upstream"})),
    "spillguard_retries_total": ("counter", frozenset({"route", "upstream"})),
    "spillguard_upstream_errors_total": ("counter", frozenset({"kind", "upstream"})),
    "spillguard_upstream_latency_seconds": ("histogram", frozenset({"route", "upstream"})),
    "spillguard_added_latency_seconds": ("histogram", frozenset({"route"})),
    "spillguard_streams_open": ("gauge", frozenset()),
    "spillguard_anomalies_total": ("counter", frozenset({"kind", "model", "upstream"})),
    "spillguard_leaked_tokens_total": (
        "counter",
        frozenset({"family", "model", "direction", "upstream"}),
    ),
    "spillguard_refusals_total": ("counter", frozenset({"reason"})),
    "spillguard_incidents_written_total": ("counter", frozenset()),
    "spillguard_incidents_dropped_total": ("counter", frozenset({"reason"})),
    "spillguard_incident_store_errors_total": ("counter", frozenset({"operation"})),
    "spillguard_incidents_deleted_total": ("counter", frozenset({"rule"})),
}
TARGET_LABELS = frozenset({"instance", "job"})
SETTINGS_ENV = {f"SPILLGUARD_{name.upper()}" for name in Settings.model_fields}


def yaml_docs(path: Path) -> list[Any]:
    return [doc for doc in yaml.safe_load_all(path.read_text(encoding="utf-8")) if doc is not None]


def manifest_files() -> list[Path]:
    return sorted(p for p in DEPLOY.rglob("*") if p.suffix in {".yml", ".yaml"})


def k8s_docs(under: Path = K8S) -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{p.relative_to(K8S)}#{i}", doc)
        for p in sorted(under.rglob("*.yaml"))
        for i, doc in enumerate(yaml_docs(p))
    ]


def sidecar_docs() -> list[tuple[str, dict[str, Any]]]:
    """The sidecar's manifests (the gateway's, in gateway/, are checked in test_deploy_gateway)."""
    return [(w, d) for w, d in k8s_docs() if not w.startswith("gateway/")]


def env_file(path: Path) -> dict[str, str]:
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            key, sep, value = line.partition("=")
            assert sep, f"{path.name}: not KEY=VALUE: {line!r}"
            out[key.strip()] = value.strip()
    return out


def settings_from_env(monkeypatch: pytest.MonkeyPatch, env: dict[str, str]) -> Settings:
    for key in list(os.environ):
        if key.startswith("SPILLGUARD_"):
            monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    return Settings()


def mounted_config(
    pod: dict[str, Any], container: dict[str, Any], docs: list[dict[str, Any]]
) -> tuple[str, str]:
    """The config file a container reads (SPILLGUARD_CONFIG): its path, and its text from the
    ConfigMap mounted there, read-only."""
    path = _env(container)["SPILLGUARD_CONFIG"]["value"]
    directory, name = os.path.split(path)
    (mount,) = [m for m in container["volumeMounts"] if m["mountPath"] == directory]
    assert mount.get("readOnly") is True, "the config file's mount is writable"
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    wanted = volume["configMap"]["name"]
    (configmap,) = [d for d in docs if d["kind"] == "ConfigMap" and d["metadata"]["name"] == wanted]
    return path, configmap["data"][name]


def check_config_file(
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    text: str,
    env: dict[str, str],
    secret_env: set[str],
) -> Settings:
    """The file as spillguard reads it beside `env` (the container's variables, placeholders
    for secrets): valid; every key it injects read from a variable that comes from a Secret;
    none of its keys overridden by the pod's or the image's variables (they would be ignored)."""
    path = tmp_path / "spillguard.toml"
    path.write_text(text, encoding="utf-8")
    keys = set(tomllib.loads(text))
    overridden = {f"SPILLGUARD_{k.upper()}" for k in keys} & (set(env) | set(image_env()))
    assert not overridden, f"the file sets what the environment overrides: {overridden}"
    settings = settings_from_env(monkeypatch, env | {"SPILLGUARD_CONFIG": str(path)})
    for name, entry in settings.upstreams.items():
        assert entry.api_key_env in secret_env, f"{name}'s key is not from a Secret"
    return settings


def test_every_manifest_parses() -> None:
    found = manifest_files()
    assert len(found) >= 6, found
    for path in found:
        assert yaml_docs(path), f"{path} is empty"
    json.loads(DASHBOARD.read_text(encoding="utf-8"))


def test_every_spillguard_variable_is_a_real_setting() -> None:
    texts = [DOCKERFILE, ENV_EXAMPLE, DASHBOARD, *manifest_files(), *DEPLOY.rglob("*.md")]
    used = {name for path in texts for name in re.findall(r"SPILLGUARD_[A-Z_]+", path.read_text())}
    assert {"SPILLGUARD_UPSTREAM", "SPILLGUARD_UPSTREAM_KEY", "SPILLGUARD_PORT"} <= used
    assert used <= SETTINGS_ENV, f"not settings: {sorted(used - SETTINGS_ENV)}"


# ---- Kubernetes --------------------------------------------------------------------------------


@pytest.mark.parametrize("version", K8S_VERSIONS)
@pytest.mark.parametrize(("where", "doc"), k8s_docs(), ids=[w for w, _ in k8s_docs()])
def test_kubernetes_manifest_matches_the_api_schema(
    where: str, doc: dict[str, Any], version: str
) -> None:
    kv.validate(doc, version, strict=True)  # raises ValidationError, naming the field


def test_kubernetes_schema_validation_can_fail() -> None:
    deployment = _deployment()
    broken = json.loads(json.dumps(deployment))
    broken["spec"]["template"]["spec"]["containers"][0]["livenessprobe"] = {}
    with pytest.raises(kv.ValidationError):
        kv.validate(broken, K8S_VERSIONS[-1], strict=True)


def _deployment() -> dict[str, Any]:
    (found,) = [d for _, d in sidecar_docs() if d["kind"] == "Deployment"]
    return found


def _pod() -> dict[str, Any]:
    pod: dict[str, Any] = _deployment()["spec"]["template"]["spec"]
    return pod


def _sidecar() -> dict[str, Any]:
    pod = _pod()
    (found,) = [
        c for c in pod.get("initContainers", []) + pod["containers"] if c["name"] == "spillguard"
    ]
    return found


def _env(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {e["name"]: e for e in container.get("env", [])}


def _port(container: dict[str, Any], ref: int | str) -> int:
    for port in container.get("ports", []):
        if ref in (port.get("name"), port["containerPort"]):
            return int(port["containerPort"])
    raise AssertionError(f"{container['name']} has no port {ref!r}")


QUANTITY = re.compile(r"^(\d+(?:\.\d+)?|\.\d+)(m|Ki|Mi|Gi|Ti|k|M|G|T)?$")
SCALE = {None: 1, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}
SCALE |= {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def quantity(text: str | int) -> float:
    match = QUANTITY.match(str(text))
    assert match, f"not a Kubernetes quantity: {text!r}"
    return float(match[1]) * SCALE[match[2]]


def test_sidecar_runs_beside_the_application() -> None:
    pod, sidecar = _pod(), _sidecar()
    if sidecar in pod.get("initContainers", []):
        assert sidecar.get("restartPolicy") == "Always", "an init container that is no sidecar"
    apps = [c for c in pod["containers"] if c is not sidecar]
    assert apps, "no application container beside spillguard"
    env = _env(sidecar)
    port = int(env["SPILLGUARD_PORT"]["value"])
    assert _port(sidecar, port) == port
    assert env["SPILLGUARD_HOST"]["value"] == "0.0.0.0", "kubelet probes come from outside the pod"
    base_urls = [e.get("value", "") for c in apps for e in c.get("env", [])]
    assert f"http://127.0.0.1:{port}/v1" in base_urls
    # Service links would set SPILLGUARD_PORT=tcp://... for a Service named spillguard.
    assert pod.get("enableServiceLinks") is False


def test_sidecar_probes_resources_and_grace() -> None:
    pod, sidecar = _pod(), _sidecar()
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        http = sidecar[probe]["httpGet"]
        assert http["path"] == path, probe
        assert _port(sidecar, http["port"]) == int(_env(sidecar)["SPILLGUARD_PORT"]["value"])
    for container in pod.get("initContainers", []) + pod["containers"]:
        res = container["resources"]
        for kind in ("cpu", "memory"):
            request, limit = res["requests"][kind], res["limits"][kind]
            assert quantity(request) <= quantity(limit), (container["name"], kind)
    grace = float(_env(sidecar)["SPILLGUARD_GRACEFUL_TIMEOUT"]["value"])
    assert pod["terminationGracePeriodSeconds"] > grace


def test_sidecar_security_context() -> None:
    pod, sidecar = _pod(), _sidecar()
    check_security_context(pod, sidecar)
    # With a read-only root, the incident database and the metrics' temp dir need emptyDirs.
    empty_dirs = {v["name"] for v in pod["volumes"] if "emptyDir" in v}
    mounts = {m["mountPath"]: m["name"] for m in sidecar["volumeMounts"]}
    db_dir = os.path.dirname(_env(sidecar)["SPILLGUARD_INCIDENTS_DB"]["value"])
    for path in (db_dir, "/tmp"):
        assert mounts.get(path) in empty_dirs, f"{path} is not a writable emptyDir"


def check_security_context(pod: dict[str, Any], container: dict[str, Any]) -> None:
    """Non-root as the image's own user, read-only root, no privilege, no capability."""
    merged = {**pod.get("securityContext", {}), **container["securityContext"]}
    assert merged["runAsNonRoot"] is True
    assert merged.get("runAsUser", 1) != 0
    assert merged["readOnlyRootFilesystem"] is True
    assert merged["allowPrivilegeEscalation"] is False
    assert merged.get("privileged", False) is False
    assert "ALL" in merged["capabilities"]["drop"]
    assert not merged["capabilities"].get("add")
    assert merged["seccompProfile"]["type"] == "RuntimeDefault"
    assert str(merged["runAsUser"]) == _dockerfile_uid(), "the image's USER and runAsUser differ"


def test_keys_come_from_the_example_secret_as_placeholders() -> None:
    secrets = {d["metadata"]["name"]: d for _, d in k8s_docs() if d["kind"] == "Secret"}
    pod = _pod()
    env = _env(_sidecar())
    assert "secretKeyRef" in env["SPILLGUARD_UPSTREAM_KEY"]["valueFrom"]
    for container in pod.get("initContainers", []) + pod["containers"]:
        for item in container.get("env", []):
            if item["name"] in {"SPILLGUARD_UPSTREAM_KEY", "SPILLGUARD_PROXY_KEYS"}:
                assert "value" not in item, f"{item['name']} given in clear"
            ref = item.get("valueFrom", {}).get("secretKeyRef")
            if ref:
                data = secrets[ref["name"]].get("stringData", {})
                assert ref["key"] in data, f"secret {ref['name']} has no {ref['key']}"
    for secret in secrets.values():
        for key, value in secret["stringData"].items():
            assert value.startswith("REPLACE_WITH_"), f"{key}: not a placeholder"


def test_kubernetes_settings_are_valid(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    env = {k: v.get("value", "placeholder") for k, v in _env(_sidecar()).items()}
    secret_env = {k for k, v in _env(_sidecar()).items() if "valueFrom" in v}
    _, text = mounted_config(_pod(), _sidecar(), [d for _, d in sidecar_docs()])
    settings = check_config_file(monkeypatch, tmp_path, text, env, secret_env)
    assert settings.host == "0.0.0.0"
    assert settings.upstream_key is not None
    assert settings.upstreams and settings.rules, "the example shows named upstreams and rules"


def test_the_app_calls_each_upstream_at_its_prefix(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    env = {k: v.get("value", "placeholder") for k, v in _env(_sidecar()).items()}
    secret_env = {k for k, v in _env(_sidecar()).items() if "valueFrom" in v}
    _, text = mounted_config(_pod(), _sidecar(), [d for _, d in sidecar_docs()])
    settings = check_config_file(monkeypatch, tmp_path, text, env, secret_env)
    port = settings.port
    served = {f"http://127.0.0.1:{port}/v1"} | {
        f"http://127.0.0.1:{port}/{name}/v1" for name in settings.upstreams
    }
    apps = [c for c in _pod()["containers"] if c is not _sidecar()]
    given = {
        e["value"]
        for c in apps
        for e in c.get("env", [])
        if e.get("value", "").startswith(f"http://127.0.0.1:{port}/")
    }
    assert given == served, "the app is given a prefix spillguard does not serve, or misses one"


def test_service_and_prometheus_annotations_match_the_pod() -> None:
    deployment = _deployment()
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["selector"]["matchLabels"].items() <= labels.items()
    pod = _pod()
    for _, doc in sidecar_docs():
        if doc["kind"] == "Service":
            assert doc["spec"]["selector"].items() <= labels.items()
            for port in doc["spec"]["ports"]:
                assert any(
                    port["targetPort"] in (p.get("name"), p["containerPort"])
                    for c in pod["containers"]
                    for p in c.get("ports", [])
                )
    notes = deployment["spec"]["template"]["metadata"]["annotations"]
    assert notes["prometheus.io/scrape"] == "true"
    assert int(notes["prometheus.io/port"]) == _port(_sidecar(), int(notes["prometheus.io/port"]))
    assert notes["prometheus.io/path"] == "/metrics"


# ---- Compose -----------------------------------------------------------------------------------


def _compose() -> dict[str, Any]:
    (doc,) = yaml_docs(COMPOSE)
    assert isinstance(doc, dict)
    return doc


def _compose_schema() -> dict[str, Any]:
    path = files("check_jsonschema") / "builtin_schemas" / "vendor" / "compose-spec.json"
    schema: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return schema


def _validator(schema: dict[str, Any]) -> jsonschema.protocols.Validator:
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER)


def test_compose_matches_the_compose_spec() -> None:
    validator = _validator(_compose_schema())
    errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(_compose())]
    assert not errors, errors
    broken = _compose()
    broken["services"]["spillguard"]["restart"] = "sometimes"
    broken["services"]["spillguard"]["healthcheck"]["intervall"] = "5s"
    assert len(list(validator.iter_errors(broken))) >= 2


def _duration(text: str) -> float:
    parts = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", text)
    assert parts and text, f"not a duration: {text!r}"
    h, m, s = (int(x or 0) for x in parts.groups())
    return h * 3600 + m * 60 + s


def test_the_compose_config_files_example_is_valid(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Shipped as comments (it changes nothing); uncommented, its example is a working policy.
    text = (DEPLOY / "spillguard.toml").read_text(encoding="utf-8")
    assert tomllib.loads(text) == {}
    lines = text[text.index("# [upstreams.xai]") :].splitlines()
    example = tmp_path / "spillguard.toml"
    example.write_text("\n".join(line.removeprefix("# ") for line in lines), encoding="utf-8")
    monkeypatch.setenv("XAI_API_KEY", "xai-test-key")
    settings = settings_from_env(
        monkeypatch, {"SPILLGUARD_CONFIG": str(example), "XAI_API_KEY": "xai-test-key"}
    )
    assert list(settings.upstreams) == ["xai"]
    assert [(r.model, r.mode.value) for r in settings.rules] == [("grok-*", "fail")]


def test_compose_service_shape(monkeypatch: pytest.MonkeyPatch) -> None:
    compose = _compose()
    sg = compose["services"]["spillguard"]
    assert (DEPLOY / sg["build"]["context"] / sg["build"]["dockerfile"]).resolve() == DOCKERFILE
    assert sg["restart"] in {"always", "unless-stopped", "on-failure"}
    test = sg["healthcheck"]["test"]
    assert test[0] == "CMD" and "/healthz" in " ".join(test)
    assert not {"curl", "wget"} & set(test), "python:*-slim has neither curl nor wget"
    (env_name,) = sg["env_file"]
    assert (DEPLOY / f"{env_name}.example").is_file(), "env_file without its .example"
    env = image_env() | env_file(DEPLOY / f"{env_name}.example") | sg["environment"]
    # The config file the container reads is the one mounted from deploy/, read-only.
    mounts = {v.split(":")[1]: v.split(":") for v in sg["volumes"]}
    source, _, mode = mounts[env["SPILLGUARD_CONFIG"]]
    assert mode == "ro" and (DEPLOY / source).is_file()
    env["SPILLGUARD_CONFIG"] = str(DEPLOY / source)
    settings = settings_from_env(monkeypatch, env)
    assert _duration(sg["stop_grace_period"]) > settings.graceful_timeout
    assert settings.host == "0.0.0.0"
    volumes = {v.split(":")[1]: v.split(":")[0] for v in sg["volumes"]}
    assert volumes[os.path.dirname(settings.incidents_db)] in compose["volumes"]
    assert sg["read_only"] is True and "ALL" in sg["cap_drop"]
    # Every file mounted from deploy/ exists.
    for service in compose["services"].values():
        for volume in service.get("volumes", []):
            source = volume.split(":")[0]
            if source.startswith("./"):
                assert (DEPLOY / source).exists(), source


def test_env_example_holds_no_secret() -> None:
    env = env_file(ENV_EXAMPLE)
    assert set(env) <= SETTINGS_ENV
    assert env["SPILLGUARD_UPSTREAM_KEY"] == "" and env["SPILLGUARD_PROXY_KEYS"] == ""
    text = ENV_EXAMPLE.read_text() + COMPOSE.read_text()
    assert not re.search(r"\b(sk|xai|gsk)-[A-Za-z0-9]{16,}", text)


# ---- Prometheus --------------------------------------------------------------------------------

DURATION = r"^(\d+y)?(\d+w)?(\d+d)?(\d+h)?(\d+m)?(\d+s)?(\d+ms)?$"
RELABEL_ACTIONS = [
    "replace", "keep", "drop", "keepequal", "dropequal", "hashmod", "labelmap",
    "labeldrop", "labelkeep", "lowercase", "uppercase",
]  # fmt: skip
PROMETHEUS_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "required": ["scrape_configs"],
    "properties": {
        "global": {
            "type": "object",
            "additionalProperties": False,
            "properties": {
                k: {"type": "string", "pattern": DURATION}
                for k in ("scrape_interval", "scrape_timeout", "evaluation_interval")
            },
        },
        "scrape_configs": {
            "type": "array",
            "minItems": 1,
            "items": {
                "type": "object",
                "additionalProperties": False,
                "required": ["job_name"],
                "properties": {
                    "job_name": {"type": "string", "minLength": 1},
                    "metrics_path": {"type": "string", "pattern": "^/"},
                    "scheme": {"enum": ["http", "https"]},
                    "scrape_interval": {"type": "string", "pattern": DURATION},
                    "static_configs": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["targets"],
                            "properties": {
                                "targets": {
                                    "type": "array",
                                    "items": {"type": "string", "pattern": r"^[\w.-]+:\d+$"},
                                },
                                "labels": {"type": "object"},
                            },
                        },
                    },
                    "kubernetes_sd_configs": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "required": ["role"],
                            "properties": {
                                "role": {"enum": ["node", "service", "pod", "endpoints", "ingress"]}
                            },
                        },
                    },
                    "relabel_configs": {
                        "type": "array",
                        "items": {
                            "type": "object",
                            "additionalProperties": False,
                            "properties": {
                                "source_labels": {"type": "array", "items": {"type": "string"}},
                                "separator": {"type": "string"},
                                "regex": {"type": "string"},
                                "modulus": {"type": "integer"},
                                "target_label": {"type": "string"},
                                "replacement": {"type": "string"},
                                "action": {"enum": RELABEL_ACTIONS},
                            },
                        },
                    },
                },
            },
        },
    },
}
PROMETHEUS_FILES = [DEPLOY / "prometheus.yml", DEPLOY / "prometheus-kubernetes.yml"]


@pytest.mark.parametrize("path", PROMETHEUS_FILES, ids=lambda p: p.name)
def test_prometheus_config_structure(path: Path) -> None:
    (config,) = yaml_docs(path)
    _validator(PROMETHEUS_SCHEMA).validate(config)
    jobs = [job["job_name"] for job in config["scrape_configs"]]
    assert len(jobs) == len(set(jobs)) and "spillguard" in jobs
    for job in config["scrape_configs"]:
        for rule in job.get("relabel_configs", []):
            re.compile(rule.get("regex", "(.*)"))  # RE2 is a subset of Python's syntax here
    glob = config.get("global", {})
    if "scrape_timeout" in glob:
        assert _duration(glob["scrape_timeout"]) <= _duration(glob["scrape_interval"])


def test_prometheus_targets_match_the_deployments() -> None:
    (config,) = yaml_docs(DEPLOY / "prometheus.yml")
    (job,) = [j for j in config["scrape_configs"] if j["job_name"] == "spillguard"]
    targets = [t for group in job["static_configs"] for t in group["targets"]]
    port = _compose()["services"]["spillguard"]["environment"]["SPILLGUARD_PORT"]
    assert targets == [f"spillguard:{port}"]
    (k8s,) = yaml_docs(DEPLOY / "prometheus-kubernetes.yml")
    keeps = {
        r["source_labels"][0]: r["regex"]
        for r in k8s["scrape_configs"][0]["relabel_configs"]
        if r.get("action") == "keep"
    }
    assert keeps["__meta_kubernetes_pod_container_name"] == _sidecar()["name"]


@pytest.mark.skipif(not shutil.which("promtool"), reason="promtool is not installed")
def test_promtool_accepts_the_compose_prometheus_config() -> None:
    done = subprocess.run(
        ["promtool", "check", "config", "--syntax-only", str(DEPLOY / "prometheus.yml")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.skipif(not shutil.which("promtool"), reason="promtool is not installed")
def test_promtool_parses_every_dashboard_query(tmp_path: Path) -> None:
    dashboard = _dashboard()
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    rules = [
        {"record": f"spillguard:dashboard_query_{i}", "expr": _as_promql(expr, variables)}
        for i, (_, expr) in enumerate(_targets(dashboard))
    ]
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = subprocess.run(
        ["promtool", "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


# ---- Grafana -----------------------------------------------------------------------------------

GRID = {
    "type": "object",
    "required": ["h", "w", "x", "y"],
    "properties": {k: {"type": "integer", "minimum": 0} for k in ("h", "w", "x", "y")},
}
DATASOURCE_REF = {
    "type": "object",
    "required": ["type", "uid"],
    "properties": {"type": {"const": "prometheus"}, "uid": {"const": "${datasource}"}},
}
DASHBOARD_SCHEMA: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["title", "uid", "schemaVersion", "panels", "templating", "time"],
    "properties": {
        "title": {"type": "string", "minLength": 1},
        "uid": {"type": "string", "pattern": "^[A-Za-z0-9_-]{1,40}$"},
        "schemaVersion": {"type": "integer", "minimum": 36, "maximum": 41},
        "time": {"type": "object", "required": ["from", "to"]},
        "templating": {
            "type": "object",
            "required": ["list"],
            "properties": {
                "list": {
                    "type": "array",
                    "items": {"type": "object", "required": ["name", "type"]},
                }
            },
        },
        "panels": {
            "type": "array",
            "minItems": 6,
            "items": {
                "type": "object",
                "required": ["id", "type", "title", "gridPos"],
                "properties": {
                    "id": {"type": "integer", "minimum": 1},
                    "gridPos": GRID,
                    "type": {"enum": ["row", "timeseries", "stat", "bargauge", "table", "gauge"]},
                },
                "if": {"properties": {"type": {"const": "row"}}},
                "then": {"not": {"required": ["targets"]}},
                "else": {
                    "required": ["datasource", "targets", "fieldConfig"],
                    "properties": {
                        "datasource": DATASOURCE_REF,
                        "targets": {
                            "type": "array",
                            "minItems": 1,
                            "items": {
                                "type": "object",
                                "required": ["refId", "expr", "datasource"],
                                "properties": {
                                    "refId": {"type": "string", "pattern": "^[A-Z]$"},
                                    "expr": {"type": "string", "minLength": 1},
                                    "datasource": DATASOURCE_REF,
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}
GRAFANA_BUILTINS = {"__rate_interval", "__interval", "__range"}


def _dashboard() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return doc


def _targets(dashboard: dict[str, Any]) -> Iterator[tuple[str, str]]:
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            yield panel["title"], target["expr"]


def _as_promql(expr: str, variables: set[str]) -> str:
    """Grafana's variables replaced by what Grafana would send, unknown ones refused."""

    def value(match: re.Match[str]) -> str:
        name = match[1] or match[2]
        assert name in variables | GRAFANA_BUILTINS, f"undefined variable ${name}"
        return "5m" if name in GRAFANA_BUILTINS else ".*"

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", value, expr)


def _selectors(node: Any) -> list[Any]:
    found: list[Any] = []

    def visit(n: Any) -> bool:
        if isinstance(n, promql.VectorSelector):
            found.append(n)
        return True

    promql.walk(node, visit)
    return found


def _labels_of(metric: str) -> frozenset[str]:
    base = re.sub(r"_(bucket|sum|count)$", "", metric)
    if base != metric:
        assert METRICS[base][0] == "histogram", f"{metric}: {base} is no histogram"
        return METRICS[base][1] | TARGET_LABELS | ({"le"} if metric.endswith("_bucket") else set())
    assert metric in METRICS, f"unknown metric {metric}"
    return METRICS[metric][1] | TARGET_LABELS


def check_query(expr: str) -> set[str]:
    """Parse one PromQL query; check metric and label names. Returns the metrics it reads."""
    ast = promql.parse(expr)  # raises ValueError on a syntax or type error
    metrics = set()
    for selector in _selectors(ast):
        assert selector.name, f"selector without a metric name in {expr}"
        labels = _labels_of(selector.name)
        for matcher in selector.matchers.matchers:
            assert matcher.name in labels, f"{selector.name} has no label {matcher.name}"
        metrics.add(selector.name)

    def visit(n: Any) -> bool:
        if isinstance(n, promql.AggregateExpr) and n.modifier is not None:
            known = frozenset().union(*(_labels_of(s.name) for s in _selectors(n.expr)))
            unknown = set(n.modifier.labels) - known
            assert not unknown, f"{n.op} by/without unknown labels {unknown} in {expr}"
        if isinstance(n, promql.Call) and n.func.name == "histogram_quantile":
            inner = {s.name for s in _selectors(n.args[1])}
            assert inner and all(m.endswith("_bucket") for m in inner), expr
            assert "rate(" in str(n.args[1]), f"histogram_quantile over no rate(): {expr}"
            assert "le" in str(n.args[1].modifier), f"histogram_quantile without le: {expr}"
        return True

    promql.walk(ast, visit)
    return metrics


def test_dashboard_structure() -> None:
    dashboard = _dashboard()
    _validator(DASHBOARD_SCHEMA).validate(dashboard)
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    cells: dict[tuple[int, int], str] = {}
    for panel in dashboard["panels"]:
        g = panel["gridPos"]
        assert g["x"] + g["w"] <= 24, f"{panel['title']} is wider than the grid"
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{panel['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = panel["title"]
        refs = [t["refId"] for t in panel.get("targets", [])]
        assert len(refs) == len(set(refs)), f"{panel['title']}: refIds repeat"


def test_dashboard_queries_parse_and_use_only_spillguard_metrics() -> None:
    dashboard = _dashboard()
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    for v in dashboard["templating"]["list"]:
        if v["type"] == "query":
            query = re.fullmatch(r"label_values\((\w+), (\w+)\)", v["query"]["query"])
            assert query and query[2] in _labels_of(query[1]), v["name"]
    used: set[str] = set()
    for title, expr in _targets(dashboard):
        try:
            used |= check_query(_as_promql(expr, variables))
        except (AssertionError, ValueError) as exc:
            raise AssertionError(f"panel {title!r}: {exc}") from exc
    bases = {re.sub(r"_(bucket|sum|count)$", "", m) for m in used}
    assert bases == set(METRICS), f"no panel for {set(METRICS) - bases}"
    exprs = " ".join(expr for _, expr in _targets(dashboard))
    for histogram in ("spillguard_upstream_latency_seconds", "spillguard_added_latency_seconds"):
        for q in ("0.5", "0.99"):
            assert re.search(rf"histogram_quantile\({q}, [^;]*{histogram}_bucket", exprs), (
                histogram,
                q,
            )


@pytest.mark.parametrize(
    "bad",
    [
        "rate(spillguard_requests_total[5m]",  # syntax
        "rate(spillguard_requests_total)",  # type: rate() of an instant vector
        "sum(rate(spillguard_request_total[5m]))",  # unknown metric
        "sum by (family) (rate(spillguard_requests_total[5m]))",  # label of another metric
        'rate(spillguard_retries_total{kind="timeout"}[5m])',  # label of another metric
        "histogram_quantile(0.99, rate(spillguard_added_latency_seconds_sum[5m]))",  # not _bucket
        "histogram_quantile(0.99, sum by (route) (rate(spillguard_added_latency_seconds_bucket"
        "[5m])))",  # no le
    ],
)
def test_dashboard_query_checks_can_fail(bad: str) -> None:
    with pytest.raises((AssertionError, ValueError)):
        check_query(bad)


def test_dashboard_metrics_are_the_apps_metrics() -> None:
    metrics_module = pytest.importorskip("spillguard.metrics")
    app = metrics_module.Metrics(Settings())
    families = {
        m.name + ("_total" if m.type == "counter" else ""): m.type for m in app.registry.collect()
    }
    assert families == {name: kind for name, (kind, _) in METRICS.items()}
    labels = {
        m._name + ("_total" if m._type == "counter" else ""): frozenset(m._labelnames)
        for m in vars(app).values()
        if isinstance(m, MetricWrapperBase)
    }
    tally = pytest.importorskip("spillguard.tally")
    for m in vars(app).values():  # the per-request counts of one process
        if isinstance(m, tally.Tally):
            labels[m.name + ("_total" if m.bounds is None else "")] = frozenset(m.labelnames)
    assert labels == {name: names for name, (_, names) in METRICS.items()}


def test_the_dashboard_filters_by_upstream_where_the_metric_has_one() -> None:
    dashboard = _dashboard()
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    assert "upstream" in variables
    for title, expr in _targets(dashboard):
        for selector in _selectors(promql.parse(_as_promql(expr, variables))):
            if "upstream" in _labels_of(selector.name):
                matched = {m.name for m in selector.matchers.matchers}
                assert "upstream" in matched, f"panel {title!r}: {selector.name} not by upstream"


def test_grafana_provisioning_points_at_the_dashboard() -> None:
    (datasources,) = yaml_docs(DEPLOY / "grafana/provisioning/datasources/prometheus.yml")
    (source,) = datasources["datasources"]
    assert source["type"] == "prometheus" and source["url"] == "http://prometheus:9090"
    (providers,) = yaml_docs(DEPLOY / "grafana/provisioning/dashboards/spillguard.yml")
    path = providers["providers"][0]["options"]["path"]
    grafana = _compose()["services"]["grafana"]
    mounted = {v.split(":")[1]: v.split(":")[0] for v in grafana["volumes"]}
    assert mounted[f"{path}/{DASHBOARD.name}"] == f"./grafana/{DASHBOARD.name}"


# ---- Dockerfile --------------------------------------------------------------------------------


def dockerfile() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments), continuation lines joined and comments dropped."""
    lines = [
        line for line in DOCKERFILE.read_text().splitlines() if not line.lstrip().startswith("#")
    ]
    joined = re.sub(r"\\\n", " ", "\n".join(lines))
    out = []
    for line in joined.splitlines():
        if line.strip():
            op, _, args = line.strip().partition(" ")
            out.append((op.upper(), args.strip()))
    return out


def _final_stage() -> list[tuple[str, str]]:
    steps = dockerfile()
    last_from = max(i for i, (op, _) in enumerate(steps) if op == "FROM")
    return steps[last_from:]


def _exec_form(args: str) -> list[str]:
    value = json.loads(args)  # shell form is no JSON list
    assert isinstance(value, list) and all(isinstance(v, str) for v in value), args
    return value


def _dockerfile_uid() -> str:
    (user,) = [args for op, args in _final_stage() if op == "USER"]
    return user.split(":")[0]


def test_dockerfile_base_user_and_exec_form() -> None:
    steps = dockerfile()
    stages = [args.split() for op, args in steps if op == "FROM"]
    for stage in stages:
        assert re.fullmatch(r"python:3\.\d+-slim(-\w+)?", stage[0]), stage
    final = _final_stage()
    (user,) = [args for op, args in final if op == "USER"]
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) > 0, "USER must be numeric and not root (runAsNonRoot)"
    assert not gid or (gid.isdigit() and int(gid) > 0)
    (entrypoint,) = [_exec_form(args) for op, args in final if op == "ENTRYPOINT"]
    for op, args in final:
        if op == "CMD":
            _exec_form(args)
    assert "exec spillguard" in " ".join(entrypoint) or entrypoint[0].endswith("spillguard")
    (health,) = [args for op, args in final if op == "HEALTHCHECK"]
    cmd = _exec_form(health.split(" CMD ", 1)[1])
    assert "/healthz" in " ".join(cmd) and not {"curl", "wget"} & set(cmd)


def image_env() -> dict[str, str]:
    """The variables the image's final stage sets."""
    env: dict[str, str] = {}
    for op, args in _final_stage():
        if op == "ENV":
            env |= dict(re.findall(r"(\w+)=(\S+)", args))
    return env


def test_dockerfile_configures_only_through_spillguard_variables() -> None:
    env = image_env()
    for name in env:
        assert name in SETTINGS_ENV or name == "PATH" or name.startswith("PYTHON"), name
    assert env["SPILLGUARD_HOST"] == "0.0.0.0"
    db_dir = os.path.dirname(env["SPILLGUARD_INCIDENTS_DB"])
    runs = " ".join(args for op, args in _final_stage() if op == "RUN")
    assert re.search(rf"-o {_dockerfile_uid()}\b[^&]*{re.escape(db_dir)}", runs), (
        "the incident database's directory is not made for the image's user"
    )


def _entrypoint_cmd() -> list[str]:
    final = _final_stage()
    (entrypoint,) = [_exec_form(args) for op, args in final if op == "ENTRYPOINT"]
    cmd = [_exec_form(args) for op, args in final if op == "CMD"]
    return entrypoint + (cmd[-1] if cmd else [])


@pytest.mark.parametrize(
    ("given", "port"),
    [
        ({"PORT": "18080", "SPILLGUARD_PORT": "9000"}, "18080"),
        ({"SPILLGUARD_PORT": "9000"}, "9000"),
        ({}, "8080"),
    ],
)
def test_entrypoint_maps_port_and_execs(tmp_path: Path, given: dict[str, str], port: str) -> None:
    stub = tmp_path / "spillguard"
    stub.write_text('#!/bin/sh\necho "$$ $SPILLGUARD_PORT $*"\n')
    stub.chmod(0o755)
    env = {"PATH": f"{tmp_path}:/usr/bin:/bin", **given}
    proc = subprocess.Popen(
        [*_entrypoint_cmd(), "--mode", "fail"], env=env, stdout=subprocess.PIPE, text=True
    )
    out, _ = proc.communicate(timeout=10)
    pid, seen_port, args = out.strip().split(" ", 2)
    assert int(pid) == proc.pid, "the entrypoint does not exec: SIGTERM would stop at sh"
    assert (seen_port, args) == (port, "--mode fail")


class _Health(http.server.BaseHTTPRequestHandler):
    status = 200
    paths: list[str] = []  # noqa: RUF012

    def do_GET(self) -> None:
        self.paths.append(self.path)
        self.send_response(self.status)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args: Any) -> None:
        pass


@pytest.mark.parametrize("status", [200, 503])
def test_healthcheck_command_probes_healthz(status: int) -> None:
    (health,) = [args for op, args in _final_stage() if op == "HEALTHCHECK"]
    cmd = _exec_form(health.split(" CMD ", 1)[1])
    if cmd[0] == "python":
        cmd[0] = sys.executable
    handler = type("Handler", (_Health,), {"status": status, "paths": []})
    server = http.server.HTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        env = {**os.environ, "PORT": str(server.server_address[1])}
        done = subprocess.run(cmd, env=env, capture_output=True, timeout=20, check=False)
    finally:
        server.shutdown()
        server.server_close()
    assert handler.paths == ["/healthz"]
    assert (done.returncode == 0) is (status == 200)


def _ignored(path: str, patterns: list[str]) -> bool:
    """.dockerignore semantics: the last matching pattern wins; a match on a parent counts."""
    result = False
    parts = path.split("/")
    candidates = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    for pattern in patterns:
        negate = pattern.startswith("!")
        clean = pattern.lstrip("!").rstrip("/")
        if any(fnmatch(c, clean) for c in candidates):
            result = not negate
    return result


def test_dockerignore_keeps_the_context_small() -> None:
    patterns = [
        line.strip()
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for path in (
        ".venv/bin/python",
        ".git/HEAD",
        "tests/test_deploy.py",
        "bench/out/result.json",
        ".pytest_cache/v/cache",
        ".mypy_cache/3.11/x.json",
        "app/spillguard/__pycache__/cli.cpython-311.pyc",
        "spillguard-incidents.sqlite3",
        "deploy/kubernetes/secret.example.yaml",
    ):
        assert _ignored(path, patterns), f"{path} would be sent to the build"
    copied = [
        args.split()[:-1] for op, args in dockerfile() if op == "COPY" and "--from" not in args
    ]
    for sources in copied:
        for source in sources:
            assert not _ignored(source.rstrip("/"), patterns), f"COPY {source} is ignored"
    assert not _ignored("app/spillguard/detect/scanner.py", patterns)
