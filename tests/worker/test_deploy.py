"""deploy/ is what an operator runs: each file parses, validates where a validator exists, and keeps
the promises docs/operations.md makes (AOF Redis, one-shot migration, API without in-process worker,
≥ 2 workers, a scheduled sweep, non-root containers, no real secrets).

External validators run when the machine has them and skip with the reason otherwise (in CI they
must be there): `docker compose config` (Compose v2 is a dev dependency on Linux x86_64),
`systemd-analyze verify`. Nothing here needs the network.
"""

from __future__ import annotations

import configparser
import importlib.util
import json
import re
import shutil
import subprocess
import warnings
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import tool_missing

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
K8S_FILES = sorted((DEPLOY / "k8s").glob("*.yaml"))
UNIT_FILES = sorted((DEPLOY / "systemd").glob("memledger-*"))
MEMLEDGER_BIN = "/opt/memledger/venv/bin/memledger"
# Oldest Kubernetes minor we claim (CronJob.timeZone is GA since 1.27) and the newest bundled schema.
K8S_OLDEST = "1.29"
PLACEHOLDER = "CHANGE_ME"
SECRET_KEY = re.compile(r"(PASSWORD|SECRET|TOKEN|API_KEY)$")
WORKER_STOP_TIMEOUT_S = 180


def _load_yaml_documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def _argv(value: str | list[str] | None) -> list[str]:
    if value is None:
        return []
    return value.split() if isinstance(value, str) else [str(part) for part in value]


def _duration_s(text: str) -> int:
    """Compose durations as used here: '30s', '3m', '1m30s'."""
    units = {"h": 3600, "m": 60, "s": 1}
    parts = re.findall(r"(\d+)([hms])", text)
    assert parts and "".join(n + u for n, u in parts) == text, f"unsupported duration {text!r}"
    return sum(int(n) * units[u] for n, u in parts)


# --- compose ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
    return loaded


@pytest.fixture(scope="module")
def services(compose: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = compose["services"]
    return found


def test_compose_has_every_role(services: dict[str, dict[str, Any]]) -> None:
    assert {"postgres", "redis", "migrate", "api", "worker", "sweep"} <= services.keys()


def test_compose_redis_keeps_an_append_only_file(services: dict[str, dict[str, Any]]) -> None:
    argv = _argv(services["redis"]["command"])
    assert argv[argv.index("--appendonly") + 1] == "yes"
    assert argv[argv.index("--maxmemory-policy") + 1] == "noeviction"
    assert any(volume.endswith(":/data") for volume in services["redis"]["volumes"])
    assert "healthcheck" in services["redis"]


def test_compose_postgres_has_a_volume_and_a_healthcheck(services: dict[str, dict[str, Any]]) -> None:
    postgres = services["postgres"]
    assert any(volume.endswith(":/var/lib/postgresql/data") for volume in postgres["volumes"])
    assert "pg_isready" in " ".join(postgres["healthcheck"]["test"])


def test_compose_migrate_runs_db_upgrade_once(services: dict[str, dict[str, Any]]) -> None:
    migrate = services["migrate"]
    assert _argv(migrate["command"]) == ["db", "upgrade"]
    assert migrate["restart"] == "no"
    assert migrate["depends_on"]["postgres"]["condition"] == "service_healthy"


def test_compose_api_runs_without_the_in_process_worker(services: dict[str, dict[str, Any]]) -> None:
    argv = _argv(services["api"]["command"])
    assert argv[0] == "serve"
    assert "--no-worker" in argv
    assert services["api"]["environment"]["MEMLEDGER_REDIS_URL"].startswith("redis://")


def test_compose_runs_at_least_two_workers(services: dict[str, dict[str, Any]]) -> None:
    workers = [svc for svc in services.values() if _argv(svc.get("command"))[:1] == ["worker"]]
    assert sum(svc.get("deploy", {}).get("replicas", 1) for svc in workers) >= 2
    for worker in workers:
        assert _duration_s(worker["stop_grace_period"]) == WORKER_STOP_TIMEOUT_S


def test_compose_sweep_runs_on_a_schedule(services: dict[str, dict[str, Any]]) -> None:
    sweep = services["sweep"]
    script = " ".join([*_argv(sweep.get("entrypoint")), *_argv(sweep["command"])])
    assert "memledger sweep" in script
    assert re.search(r"while .*sleep", script, re.DOTALL)
    assert sweep["restart"] == "unless-stopped"


def test_compose_app_services_start_after_migration(services: dict[str, dict[str, Any]]) -> None:
    for name in ("api", "worker", "sweep"):
        depends_on = services[name]["depends_on"]
        assert depends_on["migrate"]["condition"] == "service_completed_successfully", name
        assert depends_on["redis"]["condition"] == "service_healthy", name


def test_compose_hard_codes_no_secret(services: dict[str, dict[str, Any]]) -> None:
    interpolated = re.compile(r"^\$\{[A-Z_]+(:?[-?][^}]*)?\}$")
    for name, service in services.items():
        for key, value in (service.get("environment") or {}).items():
            value = "" if value is None else str(value)
            if SECRET_KEY.search(key):
                assert value == "" or interpolated.match(value), f"{name}: {key} is hard-coded"
            userinfo = re.match(r"^[a-z+]+://[^:/@]*:([^@]*)@", value)
            if userinfo:
                assert interpolated.match(userinfo.group(1)), f"{name}: {key} carries a literal password"
    env_example = (DEPLOY / "compose.env.example").read_text()
    assert f"POSTGRES_PASSWORD={PLACEHOLDER}" in env_example
    assert re.search(r"^ANTHROPIC_API_KEY=$", env_example, re.MULTILINE)


def _compose_command() -> list[str] | None:
    """Docker Compose v2: the dev dependency's binary, else `docker compose` or a standalone v2
    `docker-compose` (v1 does not know `name:`)."""
    candidates = []
    packaged = importlib.util.find_spec("compose")
    if packaged is not None and packaged.origin is not None:
        # Run the binary itself: the package's console script drops the exit status.
        binary = Path(packaged.origin).parent / "docker-compose"
        if binary.is_file():
            candidates.append([str(binary)])
    if shutil.which("docker"):
        candidates.append(["docker", "compose"])
    if shutil.which("docker-compose"):
        candidates.append(["docker-compose"])
    for command in candidates:
        probe = subprocess.run([*command, "version", "--short"], capture_output=True, text=True, timeout=30)
        version = probe.stdout.strip().lstrip("v")
        if probe.returncode == 0 and version[:1].isdigit() and int(version.split(".")[0]) >= 2:
            return command
    return None


@pytest.fixture(scope="module")
def compose_v2() -> list[str]:
    command = _compose_command()
    if command is None:
        tool_missing("Docker Compose v2 is missing: `make install` brings it on Linux x86_64")
    assert command is not None
    return command


def _compose_config(compose_v2: list[str], path: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "POSTGRES_PASSWORD": "placeholder"}
    return subprocess.run(
        [*compose_v2, "--project-directory", str(DEPLOY), "-f", str(path), "config", "-q"],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        cwd=ROOT,
    )


def test_docker_compose_accepts_the_file(compose_v2: list[str]) -> None:
    result = _compose_config(compose_v2, DEPLOY / "compose.yaml")
    assert result.returncode == 0, result.stderr


def test_docker_compose_check_refuses_a_broken_file(compose_v2: list[str], tmp_path: Path) -> None:
    # Given the shipped file with a key Compose does not know in one service
    broken = tmp_path / "compose.yaml"
    shipped = (DEPLOY / "compose.yaml").read_text()
    broken.write_text(shipped.replace("\n  worker:\n", "\n  worker:\n    restartt: always\n", 1))
    assert "restartt" in broken.read_text()

    # When it is checked, then the check fails and names the key
    result = _compose_config(compose_v2, broken)
    assert result.returncode != 0
    assert "restartt" in result.stderr


def test_shutdown_wait_fits_inside_every_platform_stop_timeout(services: dict[str, dict[str, Any]]) -> None:
    # Given the wait for in-flight runs that each deployment configures
    config_map = next(d for d in _load_yaml_documents(DEPLOY / "k8s" / "10-config.yaml") if d["kind"] == "ConfigMap")
    env_example = (DEPLOY / "systemd" / "env.example").read_text()
    waits = {
        "compose": services["worker"]["environment"]["MEMLEDGER_SHUTDOWN_TIMEOUT_S"],
        "k8s": config_map["data"]["MEMLEDGER_SHUTDOWN_TIMEOUT_S"],
        "systemd": re.search(r"^MEMLEDGER_SHUTDOWN_TIMEOUT_S=(\d+)$", env_example, re.MULTILINE).group(1),  # type: ignore[union-attr]
    }
    from consolidation.models import DEFAULT_CAP_S

    # Then each outlasts a default-capped run and ends before the platform's kill timeout
    for where, wait in waits.items():
        assert DEFAULT_CAP_S < int(wait) < WORKER_STOP_TIMEOUT_S, where


# --- Kubernetes ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def manifests() -> dict[str, dict[str, Any]]:
    """Every resource, keyed 'Kind/name'."""
    resources = {}
    for path in K8S_FILES:
        for doc in _load_yaml_documents(path):
            resources[f"{doc['kind']}/{doc['metadata']['name']}"] = doc
    return resources


def _pod_spec(resource: dict[str, Any]) -> dict[str, Any] | None:
    spec = resource.get("spec", {})
    if resource["kind"] == "CronJob":
        spec = spec["jobTemplate"]["spec"]
    template = spec.get("template")
    return template["spec"] if template else None


@pytest.mark.parametrize("path", K8S_FILES, ids=lambda path: path.name)
def test_k8s_manifest_matches_the_kubernetes_schema(path: Path) -> None:
    with warnings.catch_warnings():
        # Its dependencies (jsonschema, referencing) may deprecate things at import; not ours to fix.
        warnings.simplefilter("ignore", DeprecationWarning)
        try:
            import kubernetes_validate
        except ImportError:
            tool_missing("kubernetes-validate is not installed (pip install -e '.[dev]')")
    for doc in _load_yaml_documents(path):
        for version in (K8S_OLDEST, kubernetes_validate.latest_version()):
            try:
                kubernetes_validate.validate(doc, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                where = ".".join(str(part) for part in exc.path)
                pytest.fail(f"{path.name}: {doc['kind']} against {version}: {where}: {exc.message}")


def test_k8s_has_every_role(manifests: dict[str, dict[str, Any]]) -> None:
    assert {
        "ConfigMap/memledger-config",
        "Secret/memledger-secrets",
        "Job/memledger-migrate",
        "Deployment/memledger-api",
        "Service/memledger-api",
        "Deployment/memledger-worker",
        "CronJob/memledger-sweep",
    } <= manifests.keys()


def test_k8s_pods_run_unprivileged_with_bounded_resources(manifests: dict[str, dict[str, Any]]) -> None:
    pod_specs = {key: spec for key, res in manifests.items() if (spec := _pod_spec(res)) is not None}
    assert len(pod_specs) == 4
    for key, spec in pod_specs.items():
        assert spec["securityContext"]["runAsNonRoot"] is True, key
        assert spec["securityContext"]["runAsUser"] != 0, key
        assert spec["automountServiceAccountToken"] is False, key
        for container in spec["containers"]:
            security = container["securityContext"]
            assert security["readOnlyRootFilesystem"] is True, key
            assert security["allowPrivilegeEscalation"] is False, key
            assert security["capabilities"]["drop"] == ["ALL"], key
            assert {"cpu", "memory"} <= container["resources"]["requests"].keys(), key
            assert {"cpu", "memory"} <= container["resources"]["limits"].keys(), key
            refs = [src.get("configMapRef", src.get("secretRef"))["name"] for src in container["envFrom"]]
            assert refs == ["memledger-config", "memledger-secrets"], key


def test_k8s_api_serves_without_worker_behind_health_probes(manifests: dict[str, dict[str, Any]]) -> None:
    container = _pod_spec(manifests["Deployment/memledger-api"])["containers"][0]  # type: ignore[index]
    assert container["args"][0] == "serve"
    assert "--no-worker" in container["args"]
    # Readiness keeps the database check; liveness checks the process only, so a database
    # outage takes pods out of the Service instead of restarting every one of them.
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/livez"
    assert manifests["Service/memledger-api"]["spec"]["ports"][0]["targetPort"] == "http"


def test_k8s_worker_outlasts_a_consolidation_on_sigterm(manifests: dict[str, dict[str, Any]]) -> None:
    worker = manifests["Deployment/memledger-worker"]
    spec = _pod_spec(worker)
    assert spec is not None
    assert worker["spec"]["replicas"] >= 2
    assert spec["containers"][0]["args"][0] == "worker"
    assert spec["terminationGracePeriodSeconds"] == WORKER_STOP_TIMEOUT_S


def test_k8s_migration_job_and_hourly_sweep(manifests: dict[str, dict[str, Any]]) -> None:
    job_spec = _pod_spec(manifests["Job/memledger-migrate"])
    assert job_spec is not None and job_spec["containers"][0]["args"] == ["db", "upgrade"]
    cronjob = manifests["CronJob/memledger-sweep"]
    minute, *rest = cronjob["spec"]["schedule"].split()
    assert minute.isdigit() and rest == ["*", "*", "*", "*"]
    assert cronjob["spec"]["concurrencyPolicy"] == "Forbid"
    assert _pod_spec(cronjob)["containers"][0]["args"] == ["sweep"]  # type: ignore[index]


def test_k8s_secret_holds_only_placeholders(manifests: dict[str, dict[str, Any]]) -> None:
    secret = manifests["Secret/memledger-secrets"]
    assert "data" not in secret
    assert set(secret["stringData"]) == {
        "MEMLEDGER_DATABASE_URL",
        "MEMLEDGER_REDIS_URL",
        "ANTHROPIC_API_KEY",
        "MEMLEDGER_OPERATOR_TOKEN",
    }
    for key, value in secret["stringData"].items():
        assert PLACEHOLDER in value, key
    for key in manifests["ConfigMap/memledger-config"]["data"]:
        assert not SECRET_KEY.search(key) and key != "MEMLEDGER_DATABASE_URL", key


def test_every_scrape_of_metrics_sends_the_operator_token(manifests: dict[str, dict[str, Any]]) -> None:
    # /metrics answers loopback or the operator token only: every pod Prometheus is told to scrape is
    # scraped by a job that sends it, and every pod that scrapes gets the token from the Secret.
    scrape = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    jobs = scrape["scrape_configs"]
    assert jobs
    for job in jobs:
        assert job["authorization"]["type"] == "Bearer" and job["authorization"]["credentials_file"], job["job_name"]
    annotated = [
        m for m in manifests.values() if (_pod_template_annotations(m) or {}).get("prometheus.io/scrape") == "true"
    ]
    assert {m["metadata"]["name"] for m in annotated} == {"memledger-api", "memledger-worker"}
    for manifest in annotated:
        sources = [e["secretRef"]["name"] for e in _pod_spec(manifest)["containers"][0]["envFrom"] if "secretRef" in e]  # type: ignore[index]
        assert sources == ["memledger-secrets"], manifest["metadata"]["name"]


def _pod_template_annotations(manifest: dict[str, Any]) -> dict[str, str] | None:
    return manifest.get("spec", {}).get("template", {}).get("metadata", {}).get("annotations")


# --- systemd ---------------------------------------------------------------------------------------


def _read_unit(path: Path) -> configparser.RawConfigParser:
    parser = configparser.RawConfigParser(strict=False, delimiters=("=",), comment_prefixes=("#", ";"))
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(path.read_text(), source=str(path))
    return parser


def test_systemd_ships_every_unit() -> None:
    assert {path.name for path in UNIT_FILES} == {
        "memledger-serve.service",
        "memledger-worker@.service",
        "memledger-sweep.service",
        "memledger-sweep.timer",
    }


@pytest.mark.parametrize("path", [path for path in UNIT_FILES if path.suffix == ".service"], ids=lambda path: path.name)
def test_systemd_service_is_hardened_and_stops_on_sigterm(path: Path) -> None:
    service = _read_unit(path)["Service"]
    assert service["ExecStart"].startswith(f"{MEMLEDGER_BIN} ")
    assert service["User"] == "memledger"
    assert service["EnvironmentFile"] == "/etc/memledger/env"
    assert service["NoNewPrivileges"] == "yes"
    assert service["ProtectSystem"] == "strict"
    assert service["KillSignal"] == "SIGTERM"
    assert "TimeoutStopSec" in service


def _unit_environment(path: Path) -> dict[str, str]:
    """Every ``Environment=`` assignment of a unit (configparser keeps only the last of repeated keys)."""
    found = {}
    for line in path.read_text().splitlines():
        if line.startswith("Environment="):
            for assignment in line.removeprefix("Environment=").split():
                key, _, value = assignment.partition("=")
                found[key] = value
    return found


@pytest.mark.parametrize("instance", ["1", "2", "9", "10", "99", "1000"])
def test_systemd_worker_template_gives_every_instance_its_own_valid_port(
    instance: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from worker.config import load_config

    path = DEPLOY / "systemd" / "memledger-worker@.service"
    service = _read_unit(path)["Service"]
    assert service["ExecStart"].split()[1] == "worker"
    assert int(service["TimeoutStopSec"]) == WORKER_STOP_TIMEOUT_S
    # Given the environment systemd builds for memledger-worker@<instance> (%i expanded)
    for key, value in _unit_environment(path).items():
        monkeypatch.setenv(key, value.replace("%i", instance))
    # Then the worker listens on base + instance, a valid port distinct for each instance
    port = load_config().metrics_listen_port
    assert port == 9190 + int(instance) and 1 <= port <= 65535


def test_systemd_worker_instance_that_is_no_number_fails_with_a_clear_message(monkeypatch: pytest.MonkeyPatch) -> None:
    from worker.config import ConfigError, load_config

    for key, value in _unit_environment(DEPLOY / "systemd" / "memledger-worker@.service").items():
        monkeypatch.setenv(key, value.replace("%i", "blue"))
    with pytest.raises(ConfigError, match="MEMLEDGER_METRICS_PORT_OFFSET='blue'"):
        load_config()
    monkeypatch.setenv("MEMLEDGER_METRICS_PORT_OFFSET", "64000")
    with pytest.raises(ConfigError, match="past 65535"):
        load_config()


@pytest.mark.parametrize("path", UNIT_FILES, ids=lambda path: path.name)
def test_systemd_documentation_points_at_a_file_the_install_copies(path: Path) -> None:
    # The install steps (deploy/README.md) copy docs/<file> to the path each unit's Documentation= names.
    readme = (DEPLOY / "README.md").read_text()
    installed = dict(
        (dest, src) for src, dest in re.findall(r"^install -D -m 0644 (docs/\S+) (/usr/share/doc/\S+)$", readme, re.M)
    )
    unit = _read_unit(path)
    section = "Unit"
    if "Documentation" not in unit[section]:
        return
    for uri in unit[section]["Documentation"].split():
        assert uri.startswith("file:/") and not uri.startswith("file:///opt/"), uri
        target = "/" + uri.removeprefix("file:").lstrip("/")
        assert target in installed, f"{path.name}: {target} is not installed by deploy/README.md"
        assert (ROOT / installed[target]).is_file()


def test_systemd_timer_runs_the_sweep_hourly() -> None:
    timer = _read_unit(DEPLOY / "systemd" / "memledger-sweep.timer")["Timer"]
    assert timer["Unit"] == "memledger-sweep.service"
    assert timer["Persistent"] == "true"
    assert re.fullmatch(r"\*-\*-\* \*:\d\d:00", timer["OnCalendar"])
    sweep = _read_unit(DEPLOY / "systemd" / "memledger-sweep.service")["Service"]
    assert sweep["Type"] == "oneshot" and sweep["ExecStart"].split()[1] == "sweep"


def test_systemd_analyze_verifies_the_units(tmp_path: Path) -> None:
    if shutil.which("systemd-analyze") is None:
        tool_missing("systemd-analyze is not installed (apt-get install systemd)")
    # Given the units, with ExecStart pointing at a stub (verify checks the binary exists)
    stub = tmp_path / "memledger"
    stub.write_text("#!/bin/sh\nexit 0\n")
    stub.chmod(0o755)
    for path in UNIT_FILES:
        (tmp_path / path.name).write_text(path.read_text().replace(MEMLEDGER_BIN, str(stub)))
    # When systemd checks them
    result = subprocess.run(
        ["systemd-analyze", "verify", "--man=no", *(str(tmp_path / path.name) for path in UNIT_FILES)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    # Then it has nothing to say
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip() == "", result.stderr


# --- Dockerfile and crontab ------------------------------------------------------------------------


def _dockerfile_instructions() -> list[tuple[str, str]]:
    text = re.sub(r"\\\n", " ", (DEPLOY / "Dockerfile").read_text())
    lines = [line.strip() for line in text.splitlines()]
    return [
        (line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines if line and not line.startswith("#")
    ]


def test_dockerfile_is_multi_stage_slim_and_non_root() -> None:
    instructions = _dockerfile_instructions()
    args = dict(value.split("=", 1) for kind, value in instructions if kind == "ARG" and "=" in value)
    assert args["PYTHON_IMAGE"].startswith("python:3.11-slim")
    stages = [index for index, (kind, _) in enumerate(instructions) if kind == "FROM"]
    assert len(stages) >= 2
    assert any(kind == "RUN" and "pip install ." in value for kind, value in instructions)
    final = instructions[stages[-1] :]
    assert any(kind == "COPY" and value.startswith("--from=") for kind, value in final)
    users = [value.split(":")[0] for kind, value in final if kind == "USER"]
    assert users and users[-1] not in ("root", "0")


def test_dockerfile_uses_exec_form_and_a_healthcheck() -> None:
    instructions = dict(_dockerfile_instructions())  # the last of each kind wins, as in Docker
    entrypoint = json.loads(instructions["ENTRYPOINT"])
    cmd = json.loads(instructions["CMD"])
    assert isinstance(entrypoint, list) and entrypoint[-1] == "memledger"
    assert isinstance(cmd, list) and cmd[0] == "serve"
    healthcheck = instructions["HEALTHCHECK"]
    assert "/healthz" in healthcheck
    assert json.loads(healthcheck[healthcheck.index("CMD ") + 4 :])[0] == "python"


CRON_FIELD = re.compile(r"^(\*|\d+(-\d+)?)(/\d+)?(,(\*|\d+(-\d+)?)(/\d+)?)*$")
CRON_RANGES = [(0, 59), (0, 23), (1, 31), (1, 12), (0, 7)]


def test_crontab_line_runs_the_sweep_hourly() -> None:
    lines = [
        line
        for line in (DEPLOY / "crontab").read_text().splitlines()
        if line.strip() and not line.lstrip().startswith("#") and not re.match(r"^[A-Z_]+=", line)
    ]
    assert len(lines) == 1
    *schedule, user, command = lines[0].split(None, 6)
    assert len(schedule) == 5
    for field, (low, high) in zip(schedule, CRON_RANGES, strict=True):
        assert CRON_FIELD.match(field), field
        assert all(low <= int(n) <= high for n in re.findall(r"(?<![/\d])\d+", field)), field
    assert user == "memledger"
    assert f"{MEMLEDGER_BIN} sweep" in command
    assert ". /etc/memledger/env" in command
