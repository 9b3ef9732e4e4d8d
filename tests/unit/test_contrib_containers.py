"""contrib/kubernetes and contrib/docker validate (issue 28): every manifest against the Kubernetes API models,
strictly (an unknown or misspelt field fails, which the models alone would drop), and every check_vllm command
line in them parses with the check's own parser and passes its option checks.

Why the models and not `kubectl apply --dry-run=client`: kubectl needs an API server even for a client-side
dry run (it downloads the OpenAPI schema and the resource mappings), and this tier runs without one. The
`kubernetes` package is a test-only dependency (the `test` extra), never the product's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from check_vllm.nagios import cli
from check_vllm.probes.answers import KINDS

ROOT = Path(__file__).resolve().parents[2]
K8S = sorted((ROOT / "contrib" / "kubernetes").glob("*.yaml"))
MODELS = {("apps/v1", "Deployment"): "V1Deployment", ("v1", "Service"): "V1Service"}


def validate(*pairs: tuple[str, dict]) -> list[list[str]]:
    """What the Kubernetes API models say of each (model, document), asked in a process of their own."""
    done = subprocess.run([sys.executable, "-m", "tests.unit.k8s_models"], input=json.dumps(pairs), cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def documents() -> list[tuple[str, dict]]:
    return [(f"{path.name}#{i}", doc) for path in K8S for i, doc in enumerate(yaml.safe_load_all(path.read_text()))]


def test_there_is_a_deployment():
    assert any(doc["kind"] == "Deployment" for _, doc in documents())


@pytest.mark.parametrize(("name", "doc"), documents(), ids=[n for n, _ in documents()])
def test_every_manifest_is_a_valid_object(name, doc):
    assert validate((MODELS[(doc["apiVersion"], doc["kind"])], doc)) == [[]]


def test_the_strict_walk_catches_a_misspelt_field():
    doc = dict(documents()[0][1])
    spec = json.loads(json.dumps(doc))
    container = spec["spec"]["template"]["spec"]["containers"][0]
    container["securityContext"]["readOnlyRootFileSystem"] = True
    container["livenessProbe"]["timeoutSeconds"] = "10"
    [errors] = validate(("V1Deployment", spec))
    assert any("readOnlyRootFileSystem: no such field" in e for e in errors), errors
    assert any("timeoutSeconds: '10' is not int" in e for e in errors), errors


def deployment_container() -> dict:
    doc = next(doc for _, doc in documents() if doc["kind"] == "Deployment")
    return doc["spec"]["template"]["spec"]["containers"][0]


def test_the_deployment_runs_the_three_probes_on_an_empty_dir_read_only_and_not_as_root():
    doc = next(doc for _, doc in documents() if doc["kind"] == "Deployment")
    pod = doc["spec"]["template"]["spec"]
    c = deployment_container()
    assert pod["securityContext"]["runAsNonRoot"] is True and c["securityContext"]["readOnlyRootFilesystem"] is True
    state = next(v["name"] for v in pod["volumes"] if "emptyDir" in v and v["name"] == "check-vllm-state")
    mount = next(m["mountPath"] for m in c["volumeMounts"] if m["name"] == state)
    for kind in KINDS:
        probe = c[f"{kind}Probe"]
        argv = probe["exec"]["command"]
        assert argv[:3] == ["check_vllm", "--probe", kind]
        assert argv[argv.index("--state-dir") + 1] == mount
        assert float(argv[argv.index("-t") + 1]) <= probe["timeoutSeconds"] - 1  # the interpreter's start-up
    assert c["livenessProbe"]["failureThreshold"] == 1  # the proof is inside the check
    # the three share one state file: every option but the kind is the same
    rest = {tuple(c[f"{k}Probe"]["exec"]["command"][3:]) for k in KINDS}
    assert len(rest) == 1, rest
    # liveness and readiness share one reading a period: each reuses the other's verdict of at most half a period
    argv = c["livenessProbe"]["exec"]["command"]
    window = float(argv[argv.index("--reuse-verdict") + 1])
    assert 0 < window <= min(c[f"{k}Probe"]["periodSeconds"] for k in ("liveness", "readiness")) / 2


def commands() -> list[tuple[str, list[str]]]:
    """Every check_vllm argv in contrib/kubernetes and contrib/docker."""
    found = [(name, c[f"{k}Probe"]["exec"]["command"]) for name, doc in documents() if doc["kind"] == "Deployment"
             for c in doc["spec"]["template"]["spec"]["containers"] for k in KINDS if f"{k}Probe" in c]
    compose = yaml.safe_load((ROOT / "contrib" / "docker" / "compose.yaml").read_text())
    found += [("compose.yaml", s["healthcheck"]["test"][1:]) for s in compose["services"].values() if "healthcheck" in s]
    for line in (ROOT / "contrib" / "docker" / "Dockerfile").read_text().splitlines():
        if line.strip().startswith("CMD ["):
            found.append(("Dockerfile", json.loads(line.strip()[4:])))
    return found


@pytest.mark.parametrize(("where", "argv"), commands(), ids=[w for w, _ in commands()])
def test_every_command_line_is_one_the_check_accepts(where, argv):
    assert argv[0] == "check_vllm"
    args = cli.parser().parse_args(argv[1:])
    cli._validate(args)
    assert args.probe in KINDS


def test_compose_has_a_restarter_on_unhealthy():
    compose = yaml.safe_load((ROOT / "contrib" / "docker" / "compose.yaml").read_text())
    vllm, restarter = compose["services"]["vllm"], compose["services"]["restarter"]
    assert vllm["healthcheck"]["test"][1:4] == ["check_vllm", "--probe", "liveness"]
    assert vllm["labels"]["check_vllm.restart"] == "unhealthy"
    assert "/var/run/docker.sock:/var/run/docker.sock" in restarter["volumes"]
    assert restarter["entrypoint"][1:] == ["/restart-unhealthy", "--filter", "label=check_vllm.restart=unhealthy"]
    script = (ROOT / "contrib" / "docker" / "restart-unhealthy").read_text()
    assert "--filter event=health_status" in script and '"health_status: unhealthy"' in script
