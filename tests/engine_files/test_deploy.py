"""The KServe manifests in deploy/kserve/, held to what KServe needs and to what this engine serves: ports, health
paths (asked of the running engine), model directory, user and the environment variables it reads."""

import re

import pytest
import requests
import yaml

from baking import default_engine
from chariot_support.server.server import ENGINE_DEFAULTS

ROOT = default_engine()
KSERVE = ROOT / "deploy" / "kserve"
DNS_1123_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def load(name: str) -> dict:
    documents = list(yaml.safe_load_all((KSERVE / name).read_text()))
    assert len(documents) == 1, f"{name} should hold one resource, found {len(documents)}"
    return documents[0]


@pytest.fixture(scope="module")
def runtime() -> dict:
    return load("servingruntime.yaml")


@pytest.fixture(scope="module")
def service() -> dict:
    return load("inferenceservice.yaml")


@pytest.fixture(scope="module")
def container(runtime) -> dict:
    (found,) = [c for c in runtime["spec"]["containers"] if c["name"] == "kserve-container"]
    return found


def dockerfile_setting(pattern: str) -> str:
    """The last match in the Dockerfile: the final stage's setting, the one the image runs with."""
    found = re.findall(pattern, (ROOT / "Dockerfile").read_text(), re.M)
    assert found, f"the Dockerfile has no {pattern}"
    return found[-1]


def test_resources_are_what_kserve_accepts(runtime, service):
    assert (runtime["apiVersion"], runtime["kind"]) == ("serving.kserve.io/v1alpha1", "ServingRuntime")
    assert (service["apiVersion"], service["kind"]) == ("serving.kserve.io/v1beta1", "InferenceService")
    for resource in (runtime, service):
        name = resource["metadata"]["name"]
        assert DNS_1123_LABEL.fullmatch(name), f"{resource['kind']} name {name!r} is not a DNS-1123 label"


def test_the_inference_service_uses_this_runtime_and_a_format_it_supports(runtime, service):
    model = service["spec"]["predictor"]["model"]
    assert model["runtime"] == runtime["metadata"]["name"]
    formats = {(f["name"], f.get("version")) for f in runtime["spec"]["supportedModelFormats"]}
    assert (model["modelFormat"]["name"], model["modelFormat"].get("version")) in formats
    assert model["protocolVersion"] in runtime["spec"]["protocolVersions"]
    assert re.fullmatch(r"[a-z0-9]+://\S+", model["storageUri"]), "storageUri must be a URI KServe can download"


def test_ports_are_the_engines_rest_and_grpc_ports(runtime, container):
    assert runtime["spec"]["protocolVersions"] == ["v2", "grpc-v2"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    # KServe (and Knative) route HTTP/1.1 to a port named http1 and HTTP/2 cleartext (gRPC) to one named h2c.
    assert ports == {"http1": ENGINE_DEFAULTS["http_port"], "h2c": ENGINE_DEFAULTS["grpc_port"]}
    assert container["image"].rsplit("/", 1)[-1].startswith(f"{ROOT.name}:")
    annotations = runtime["spec"]["annotations"]
    assert int(annotations["prometheus.kserve.io/port"]) == ENGINE_DEFAULTS["metrics_port"]


@pytest.mark.parametrize("probe", ["livenessProbe", "readinessProbe"])
def test_probes_ask_paths_the_running_engine_answers(container, engine, probe):
    check = container[probe]["httpGet"]
    assert check["port"] == ENGINE_DEFAULTS["http_port"]
    response = requests.get(f"{engine.url}{check['path']}", timeout=10)
    assert response.status_code == 200, f"{probe} path {check['path']} answered {response.status_code}"


def test_model_files_land_where_the_image_reads_them(container):
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["MODEL_DIR"] == "/mnt/models" == dockerfile_setting(r"^\s*MODEL_DIR=(\S+)")


def test_every_variable_set_is_one_the_engine_reads(container):
    sources = "\n".join(p.read_text() for p in (ROOT / "src").rglob("*.py"))
    for variable in container["env"]:
        assert f'"{variable["name"]}"' in sources, f"the engine never reads {variable['name']}"


def test_threads_match_the_cpu_limit(container):
    env = {e["name"]: e["value"] for e in container["env"]}
    assert float(env["CHARIOT_THREADS"]) == float(container["resources"]["limits"]["cpu"])


def test_runs_as_the_images_user_on_a_read_only_filesystem(runtime, container):
    context = container["securityContext"]
    assert context["runAsNonRoot"] is True
    assert str(context["runAsUser"]) == dockerfile_setting(r"^USER\s+(\d+)")
    assert context["allowPrivilegeEscalation"] is False
    assert context["readOnlyRootFilesystem"] is True
    # The engine writes temporary files, and with parallel workers its metrics, so both need a volume.
    mounted = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
    volumes = {v["name"] for v in runtime["spec"]["volumes"]}
    workdir = dockerfile_setting(r"^WORKDIR\s+(\S+)")
    for path in ("/tmp", workdir):
        assert path in mounted and mounted[path] in volumes, f"{path} must be a writable volume"
