"""Grading with BFCL's own checkers: our parsed tool calls in, BFCL's verdict out.

BFCL grades decoded calls, not text. Our chat format's parser (chat/tool_parsers.py) turns a
reply into OpenAI tool calls; here they become what BFCL's handlers hand its checkers:
  ast / relevance  `[{function_name: {param: value}}]` for `ast_checker`; a reply our parser
                   rejects is BFCL's "failed to decode" (wrong for ast and live_relevance, right
                   for the irrelevance categories);
  multi_turn       Python call strings `name(param=value)` per step, per turn, which BFCL's
                   `execute_multi_turn_func_call` evaluates on its simulated API instances and
                   `multi_turn_checker` compares with the ground truth (state and results).

Importing the checkers: `bfcl_eval.eval_checker.ast_eval.ast_checker` imports BFCL's model
registry (`bfcl_eval.constants.model_config`), which imports every API client SDK its model
handlers use. The checker only asks the registry whether the model needs dots in function names
replaced by underscores; ours does not (tools keep BFCL's names). So a minimal stand-in registry
answering that is installed under the registry's module name before the import, and the SDKs
are not needed (see setup.py's "bfcl" extra).

Isolation of multi-turn runs: BFCL keeps its API instances in a module-level dict keyed by a
model name and the entry id. Every `SimulatedApis` uses a fresh model name, so two runs of the
same entry never share state, and `close()` removes its instances again.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import importlib
import inspect
import json
import keyword
import re
import sys
import types
import uuid
from collections.abc import Sequence
from typing import Any

from agentrl_jax.chat.tool_parsers import ParseResult, ToolParseError
from agentrl_jax.evaluation import bfcl_data
from agentrl_jax.evaluation.bfcl_data import BfclExample

# The model name BFCL's AST checker is given (it only looks it up in the registry below).
MODEL_NAME = "agentrl_jax"
_REGISTRY = "bfcl_eval.constants.model_config"

Calls = list[dict[str, dict[str, Any]]]  # BFCL's decoded form: [{name: {param: value}}]


@dataclasses.dataclass(frozen=True)
class Grade:
    """BFCL's verdict on one example: `valid`, and for a failure its error type and message."""

    valid: bool
    error_type: str = ""
    error: str = ""


class _KeepNames(dict):
    """Stand-in for BFCL's model registry: every model keeps dotted function names."""

    def __missing__(self, model_name: str) -> Any:
        return types.SimpleNamespace(underscore_to_dot=False)


@functools.cache
def checkers() -> types.SimpleNamespace:
    """BFCL's checker modules, imported once (with the stand-in registry, see the docstring)."""
    bfcl_data.data_dir()  # a clear ImportError when bfcl-eval is missing
    if _REGISTRY not in sys.modules:
        registry = types.ModuleType(_REGISTRY)
        registry.__doc__ = "agentrl_jax stand-in: no BFCL model handlers are loaded."
        vars(registry)["MODEL_CONFIG_MAPPING"] = _KeepNames()
        sys.modules[_REGISTRY] = registry
    else:  # the real registry (bfcl-eval installed with its SDKs): add our model to it
        sys.modules[_REGISTRY].MODEL_CONFIG_MAPPING.setdefault(
            MODEL_NAME.replace("_", "/"), types.SimpleNamespace(underscore_to_dot=False)
        )
    from bfcl_eval.constants import default_prompts
    from bfcl_eval.eval_checker.ast_eval import ast_checker
    from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_checker, multi_turn_utils

    return types.SimpleNamespace(
        ast=ast_checker, multi_turn=multi_turn_checker, utils=multi_turn_utils,
        prompts=default_prompts,
    )


def decode_calls(parsed: ParseResult) -> Calls | None:
    """Our parser's result in BFCL's decoded form; None when the reply did not parse."""
    if isinstance(parsed, ToolParseError):
        return None
    calls = []
    for call in parsed.tool_calls:
        function = call["function"]
        calls.append({function["name"]: json.loads(function["arguments"])})
    return calls


def grade_single_turn(example: BfclExample, calls: Calls | None, parse_error: str = "") -> Grade:
    """BFCL's verdict on the (decoded) reply to a single-turn example."""
    if example.kind == "relevance":
        # BFCL: a reply "contains a call" when it decodes to a non-empty list of calls.
        has_call = bool(calls)
        if "irrelevance" in example.category:
            return Grade(True) if not has_call else Grade(
                False, "irrelevance_error:decoder_success", f"called {_names(calls)}")
        return Grade(True) if has_call else Grade(
            False, "relevance_error:decoder_failed", parse_error or "no function call")
    if calls is None:
        return Grade(False, "ast_decoder:decoder_failed", parse_error)
    try:
        result = checkers().ast.ast_checker(
            copy.deepcopy(example.functions), copy.deepcopy(calls),
            copy.deepcopy(example.ground_truth), bfcl_data.category_language(example.category),
            example.category, MODEL_NAME,
        )
    except Exception as e:  # a checker crash on odd output fails that example only
        return Grade(False, "ast_checker:exception", f"{type(e).__name__}: {e}")
    if result["valid"]:
        return Grade(True)
    return Grade(False, result.get("error_type", ""), "; ".join(map(str, result["error"])))


def _names(calls: Calls | None) -> str:
    return ", ".join(name for call in calls or () for name in call)


# ---- multi-turn -------------------------------------------------------------------------------

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_UNKNOWN_PREFIX = "agentrl_unknown_function_"


@functools.cache
def _api_methods(class_name: str) -> frozenset[str]:
    """Public method names of one of BFCL's simulated API classes."""
    module = importlib.import_module(checkers().utils.CLASS_FILE_PATH_MAPPING[class_name])
    cls = getattr(module, class_name)
    return frozenset(
        n for n, _ in inspect.getmembers(cls, predicate=inspect.isfunction) if n[0] != "_")


def _is_keyword_name(name: str) -> bool:
    return bool(_IDENTIFIER.match(name)) and not keyword.iskeyword(name)


class SimulatedApis:
    """BFCL's simulated API instances of one multi-turn example, for generation and grading."""

    def __init__(self, example: BfclExample):
        if example.kind != "multi_turn":
            raise ValueError(f"{example.id} is not a multi-turn example")
        self.example = example
        # A fresh BFCL "model name" per run; lowercase hex keeps BFCL's instance names intact.
        self.namespace = f"agentrl_{uuid.uuid4().hex}"
        self._classes = list(example.entry["involved_classes"])
        self._methods = frozenset().union(*(_api_methods(c) for c in self._classes))
        self._long_context = "long_context" in example.category

    def call_strings(self, calls: Calls) -> list[str]:
        """Decoded calls as the Python call strings BFCL's executor evaluates.

        BFCL evaluates these strings with `eval`. A name that is not a method of the example's
        API classes is renamed to one that is certainly undefined, so it fails with an error
        (as a hallucinated function does in BFCL) and never reaches a Python builtin.
        """
        out = []
        for call in calls:
            for name, args in call.items():
                if not (_IDENTIFIER.match(name) and name in self._methods):
                    name = _UNKNOWN_PREFIX + re.sub(r"\W", "_", name)
                if all(_is_keyword_name(k) for k in args):
                    inner = ",".join(f"{k}={v!r}" for k, v in args.items())
                else:  # not valid keyword names: still a well-formed call, which fails in BFCL
                    inner = f"**{args!r}"
                out.append(f"{name}({inner})")
        return out

    def execute(self, call_strings: Sequence[str]) -> list[str]:
        """Runs one step's calls on this run's instances; one result string per call."""
        entry = self.example.entry
        results, _ = checkers().utils.execute_multi_turn_func_call(
            list(call_strings), entry["initial_config"], self._classes, self.namespace,
            entry["id"], long_context=self._long_context, is_evaL_run=False,
        )
        return [str(r) for r in results]

    def grade(self, turns: Sequence[Sequence[Sequence[str]]]) -> Grade:
        """BFCL's verdict on the run: the non-empty call-string steps of each turn.

        Fewer turns than the ground truth means the run was cut off at BFCL's step limit,
        which BFCL fails without checking.
        """
        truth = self.example.ground_truth
        if len(turns) != len(truth):
            return Grade(False, "multi_turn:force_terminated",
                         f"{len(turns)} of {len(truth)} turns completed")
        decoded = [[list(step) for step in turn if step] for turn in turns]
        try:
            result = checkers().multi_turn.multi_turn_checker(
                decoded, copy.deepcopy(truth), copy.deepcopy(self.example.entry),
                self.example.category, self.namespace,
            )
        except Exception as e:  # a checker crash on odd output fails that example only
            return Grade(False, "multi_turn:checker_exception", f"{type(e).__name__}: {e}")
        if result["valid"]:
            return Grade(True)
        return Grade(False, result.get("error_type", ""), str(result.get("error_message", "")))

    def close(self) -> None:
        """Drops this run's instances (generation and grading) from BFCL's module globals."""
        store = vars(checkers().utils)
        for name in [n for n in store if n.startswith(self.namespace)]:
            del store[name]

    def __enter__(self) -> SimulatedApis:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def step_limit() -> int:
    """BFCL's MAXIMUM_STEP_LIMIT: model steps with calls per turn before a forced quit."""
    return int(checkers().prompts.MAXIMUM_STEP_LIMIT)


def additional_function_prompt() -> str:
    """The user message BFCL sends when miss_func's held-out functions become available."""
    return str(checkers().prompts.DEFAULT_USER_PROMPT_FOR_ADDITIONAL_FUNCTION_FC)
