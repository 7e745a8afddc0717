"""deploy/kubernetes renders offline (kustomize) into well-formed objects that agree with the gateway's own
settings: its config and tenants parse with the gateway's loader, ports, probes, DNS name and flags line up,
and make-room is loaded with flags vLLM and make-room accept."""

from __future__ import annotations

import ast
import json
import os
import shlex
import tomllib
from pathlib import Path
from typing import Any

import pytest
from deploykit import (
    DEPLOY,
    KUBERNETES,
    OVERLAYS,
    REPO,
    container,
    data,
    find,
    matches,
    one,
    render,
)

from flatshare.gateway.app import build_gateway
from flatshare.gateway.configfile import load_config

NAMESPACED = {
    "Deployment",
    "Service",
    "ConfigMap",
    "Secret",
    "PodDisruptionBudget",
    "ServiceMonitor",
    "PodMonitor",
}


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict[str, Any]]]:
    return {overlay: render(KUBERNETES / "overlays" / overlay) for overlay in OVERLAYS}


def vllm_deployments(docs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        d
        for d in find(docs, "Deployment")
        if d["spec"]["template"]["metadata"]["labels"].get("app.kubernetes.io/name") == "vllm"
    ]


def args_of(deployment: dict[str, Any]) -> list[str]:
    return [str(a) for a in deployment["spec"]["template"]["spec"]["containers"][0]["args"]]


def flag(args: list[str], name: str) -> str | None:
    return args[args.index(name) + 1] if name in args else None


def gateway_settings(docs: list[dict[str, Any]], tmp_path: Path) -> tuple[Any, dict[str, Any]]:
    """The gateway's config as its pod builds it: the init container's command run over the mounted
    ConfigMap and Secret (files in `tmp_path` at the mount paths), then the gateway's own loader."""
    deployment = one(docs, "Deployment", "flatshare-gateway")
    spec = deployment["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in spec["volumes"]}
    init = container(spec, "config", init=True)
    for mount in init["volumeMounts"]:
        volume = volumes[mount["name"]]
        if "configMap" in volume:
            source = one(docs, "ConfigMap", "flatshare-gateway-config")
            assert volume["configMap"]["name"] == source["metadata"]["name"]
        elif "secret" in volume:
            source = one(docs, "Secret", "flatshare-gateway-tenants")
            assert volume["secret"]["secretName"] == source["metadata"]["name"]
        else:
            continue
        folder = tmp_path / mount["mountPath"].lstrip("/")
        folder.mkdir(parents=True)
        for key in source.get("data", {}):
            (folder / key).write_text(data(source, key))
    # `cat A B > OUT`: the command the init container runs, with paths moved under tmp_path
    words = shlex.split(init["args"][0])
    assert words[0] == "cat" and words[-2] == ">", words
    inputs, output = words[1:-2], words[-1]
    joined = "".join((tmp_path / p.lstrip("/")).read_text() for p in inputs)
    assert any(m["name"] == "run" and output.startswith(m["mountPath"]) for m in init["volumeMounts"])
    gateway = container(spec, "gateway")
    assert gateway["args"] == ["--config", output]
    assert any(output.startswith(m["mountPath"]) for m in gateway["volumeMounts"]), (
        "the gateway cannot read it"
    )
    path = tmp_path / "gateway.toml"
    path.write_text(joined)
    return load_config(path), deployment


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_manifests_are_well_formed(rendered: dict[str, list[dict[str, Any]]], overlay: str) -> None:
    docs = rendered[overlay]
    seen = set()
    for doc in docs:
        assert doc.get("apiVersion") and doc.get("kind") and doc["metadata"].get("name"), doc
        key = (doc["kind"], doc["metadata"]["name"])
        assert key not in seen, key
        seen.add(key)
        if doc["kind"] in NAMESPACED:
            assert doc["metadata"].get("namespace") == "flatshare", key
    for deployment in find(docs, "Deployment"):
        template = deployment["spec"]["template"]
        assert matches(deployment["spec"]["selector"]["matchLabels"], template["metadata"]["labels"])
        for c in template["spec"]["containers"]:
            assert c["resources"]["requests"], (deployment["metadata"]["name"], c["name"])
            ports = {p["name"]: p["containerPort"] for p in c["ports"]}
            for probe in ("readinessProbe", "livenessProbe"):
                assert c[probe]["httpGet"]["port"] in ports
            annotations = template["metadata"]["annotations"]
            assert annotations["prometheus.io/scrape"] == "true"
            assert int(annotations["prometheus.io/port"]) in ports.values()
    pods = [d["spec"]["template"]["metadata"]["labels"] for d in find(docs, "Deployment")]
    for service in find(docs, "Service"):
        assert any(matches(service["spec"]["selector"], labels) for labels in pods), service["metadata"][
            "name"
        ]
    # two Deployments never select each other's pods
    deployments = find(docs, "Deployment")
    for a in deployments:
        for b in deployments:
            if a is not b:
                labels = b["spec"]["template"]["metadata"]["labels"]
                assert not matches(a["spec"]["selector"]["matchLabels"], labels)


def test_gateway_objects_agree_with_the_gateway(
    rendered: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    docs = rendered["stock"]
    config, deployment = gateway_settings(docs, tmp_path)
    spec = deployment["spec"]["template"]["spec"]
    gateway = container(spec, "gateway")
    ports = {p["name"]: p["containerPort"] for p in gateway["ports"]}
    assert config.host == "0.0.0.0" and ports["http"] == config.port
    assert deployment["spec"]["replicas"] == 2
    # the probes hit GET routes the gateway has
    routes = {
        route.path for route in build_gateway(config).app.fallback.routes if "GET" in (route.methods or ())
    }
    assert gateway["readinessProbe"]["httpGet"]["path"] == "/health"
    assert gateway["livenessProbe"]["httpGet"]["path"] in routes and "/health" in routes
    # tenants come from the Secret, with the keys the init container reads
    secret = one(docs, "Secret", "flatshare-gateway-tenants")
    assert set(secret["data"]) == {"tenants.toml"}
    assert [t.name for t in config.tenants] == ["voice-app", "agents"] and not config.open
    alone = tomllib.loads(data(one(docs, "ConfigMap", "flatshare-gateway-config"), "gateway.toml"))
    assert "tenants" not in alone and "admin_token" not in alone  # secrets stay in Secrets
    admin = next(e for e in gateway["env"] if e["name"] == "FLATSHARE_ADMIN_TOKEN")
    assert admin["valueFrom"]["secretKeyRef"]["optional"] is True
    # the audit log and /tmp are writable volumes on a read-only root
    assert gateway["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"]: m for m in gateway["volumeMounts"]}
    assert str(Path(config.audit_log).parent) in mounts and not mounts[
        str(Path(config.audit_log).parent)
    ].get("readOnly")
    assert spec["securityContext"]["runAsNonRoot"] is True
    # streams may finish (drain_timeout_s) after the preStop pause, within the grace period
    pause = int(gateway["lifecycle"]["preStop"]["exec"]["command"][-1])
    assert config.drain_timeout_s + pause < spec["terminationGracePeriodSeconds"]
    # the Service and the PodDisruptionBudget reach the gateway pods
    service = one(docs, "Service", "flatshare-gateway")
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert matches(service["spec"]["selector"], labels) and service["spec"]["ports"][0]["targetPort"] in (
        "http",
        config.port,
    )
    pdb = one(docs, "PodDisruptionBudget", "flatshare-gateway")
    assert matches(pdb["spec"]["selector"]["matchLabels"], labels) and pdb["spec"]["minAvailable"] == 1


def test_gateway_follows_the_headless_service(
    rendered: dict[str, list[dict[str, Any]]], tmp_path: Path
) -> None:
    docs = rendered["canary"]
    config, _ = gateway_settings(docs, tmp_path)
    assert config.backends == () and len(config.discover) == 1
    discover = config.discover[0]
    service = one(docs, "Service", discover.name.split(".")[0])
    assert service["spec"]["clusterIP"] == "None" and not service["spec"].get("publishNotReadyAddresses")
    assert [p["port"] for p in service["spec"]["ports"]] == [discover.port]
    vllm = vllm_deployments(docs)
    assert len(vllm) == 2
    for deployment in vllm:
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert matches(service["spec"]["selector"], labels)
        c = deployment["spec"]["template"]["spec"]["containers"][0]
        assert int(flag(args_of(deployment), "--port") or 0) == discover.port
        served = {p["name"]: p["containerPort"] for p in c["ports"]}
        assert served["http"] == discover.port and set(served) <= {"http", "make-room-mx"}
        # the pod keeps serving after it leaves DNS until the gateways have re-resolved
        assert (
            int(c["lifecycle"]["preStop"]["exec"]["command"][-1]) > discover.interval_s + discover.timeout_s
        )


def scheduler_classes() -> set[str]:
    """Class names `flatshare.scheduler` defines (read from its source: importing it imports vLLM)."""
    tree = ast.parse((REPO / "src" / "flatshare" / "scheduler" / "__init__.py").read_text())
    return {node.name for node in tree.body if isinstance(node, ast.ClassDef)}


@pytest.mark.parametrize(("overlay", "make_room_pods"), [("stock", 0), ("canary", 1), ("make-room", 2)])
def test_vllm_pods_load_make_room_as_the_readme_says(
    rendered: dict[str, list[dict[str, Any]]], overlay: str, make_room_pods: int
) -> None:
    docs = rendered[overlay]
    settings = one(docs, "ConfigMap", "vllm-settings")
    with_make_room = 0
    for deployment in vllm_deployments(docs):
        template = deployment["spec"]["template"]
        c = template["spec"]["containers"][0]
        args = args_of(deployment)
        assert c["command"][-2:] == ["-m", "vllm.entrypoints.openai.api_server"]
        assert flag(args, "--scheduling-policy") == "priority"
        assert flag(args, "--model") == "$(MODEL)" and "MODEL" in settings["data"]
        assert c["envFrom"][0]["configMapRef"]["name"] == settings["metadata"]["name"]
        assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"
        assert template["spec"]["nodeSelector"]
        cls = flag(args, "--scheduler-cls")
        label = template["metadata"]["labels"]["flatshare.dev/scheduler"]
        if cls is None:
            assert "--additional-config" not in args and label == "stock"
            continue
        with_make_room += deployment["spec"]["replicas"]
        module, _, name = cls.rpartition(".")
        assert module == "flatshare.scheduler" and name in scheduler_classes() and label == "make-room"
        additional = json.loads(flag(args, "--additional-config") or "")
        metrics = {"port": 9464, "host": "0.0.0.0"}  # the pod's IP: Prometheus scrapes it from elsewhere
        assert additional == {"make_room": {"enabled": True}, "flatshare_metrics": metrics}
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        assert ports["make-room-mx"] == metrics["port"]
    assert with_make_room == make_room_pods


@pytest.mark.vllm
def test_make_room_accepts_the_additional_config(rendered: dict[str, list[dict[str, Any]]]) -> None:
    from flatshare.scheduler.config import MakeRoomConfig
    from flatshare.scheduler.metrics_config import MetricsConfig

    for deployment in vllm_deployments(rendered["make-room"]):
        additional = json.loads(flag(args_of(deployment), "--additional-config") or "")
        assert MakeRoomConfig.from_additional_config(additional).enabled
        assert MetricsConfig.from_additional_config(additional).port == 9464


def test_dashboard_and_rules_are_generated_from_their_files(
    rendered: dict[str, list[dict[str, Any]]],
) -> None:
    docs = rendered["stock"]
    dashboard = one(docs, "ConfigMap", "flatshare-grafana-dashboard")
    source = DEPLOY / "grafana" / "dashboards" / "flatshare-gateway.json"
    assert data(dashboard, source.name) == source.read_text()
    assert dashboard["metadata"]["labels"]["grafana_dashboard"] == "1"
    rules = one(docs, "ConfigMap", "flatshare-prometheus-rules")
    assert data(rules, "rules.yml") == (DEPLOY / "prometheus" / "rules.yml").read_text()
    # no copy of either file anywhere under deploy/kubernetes
    copies = [p for p in KUBERNETES.rglob("*") if p.name in (source.name, "rules.yml")]
    assert not copies, copies


def test_prometheus_operator_component_renders(tmp_path: Path) -> None:
    (tmp_path / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nnamespace: flatshare\n"
        f"resources: [{os.path.relpath(KUBERNETES / 'overlays' / 'stock', tmp_path)}]\n"
        f"components: [{os.path.relpath(KUBERNETES / 'components' / 'prometheus-operator', tmp_path)}]\n"
    )
    docs = render(tmp_path)
    monitor = one(docs, "ServiceMonitor", "flatshare-gateway")
    service = one(docs, "Service", "flatshare-gateway")
    assert monitor["spec"]["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    assert monitor["spec"]["endpoints"][0]["port"] in {p["name"] for p in service["spec"]["ports"]}
    pods = one(docs, "PodMonitor", "vllm")
    vllm = vllm_deployments(docs)[0]["spec"]["template"]
    assert matches(pods["spec"]["selector"]["matchLabels"], vllm["metadata"]["labels"])
    assert pods["spec"]["podMetricsEndpoints"][0]["port"] in {
        p["name"] for p in vllm["spec"]["containers"][0]["ports"]
    }
