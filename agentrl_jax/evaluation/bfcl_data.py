"""BFCL v3 data: categories, samples with their possible answers, and tools in our chat format.

The questions, possible answers and multi-turn function docs are the files that
`bfcl-eval==2025.6.8` ships (Apache-2.0), read in place from the installed package. Category
names and the file of each are BFCL's own (`bfcl_eval.constants.category_mapping`).

Three kinds of category, graded differently (see bfcl_grade):
  ast         one user turn; the calls are compared with the possible answers by BFCL's AST
              checker (simple, multiple, parallel, parallel_multiple, java, javascript, and the
              live_ versions of the first four);
  relevance   one user turn; only whether the reply calls a function at all counts
              (irrelevance, live_irrelevance: it must not; live_relevance: it must);
  multi_turn  several user turns over BFCL's simulated APIs (file system, trading bot, ...);
              graded by executing the calls and comparing states and results.

BFCL function docs use Python-ish types ("dict", "float", "tuple", Java and JavaScript types); the
model is shown them as OpenAI tools with JSON-schema types. The grader keeps the original docs:
BFCL's checker reads the declared types from them.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import importlib.resources
import json
import pathlib
from collections.abc import Iterable, Sequence
from typing import Any, Literal

Kind = Literal["ast", "relevance", "multi_turn"]
Message = dict[str, Any]

# BFCL's own category names and groups; imported lazily so that the module loads without the
# optional dependency (the error then says how to install it).


def _bfcl_categories():
    try:
        from bfcl_eval.constants import category_mapping
    except ImportError as e:
        raise ImportError(
            "the BFCL evaluation needs the optional dependency bfcl-eval: "
            "`pip install --no-deps bfcl-eval==2025.6.8` and `pip install -e .[bfcl]` "
            "(scripts/setup.sh does both)"
        ) from e
    return category_mapping


def data_dir() -> pathlib.Path:
    """The installed package's `data/` folder."""
    _bfcl_categories()
    return pathlib.Path(str(importlib.resources.files("bfcl_eval") / "data"))


def all_categories() -> list[str]:
    """Every v3 category BFCL scores, in its leaderboard order."""
    return list(_bfcl_categories().TEST_COLLECTION_MAPPING["all"])


def resolve_categories(names: Iterable[str]) -> list[str]:
    """Category or group names (BFCL's: "all", "live", "non_live", "multi_turn", "ast", ...)
    expanded into categories, deduplicated, in leaderboard order."""
    mapping = _bfcl_categories()
    wanted: set[str] = set()
    for name in names:
        if name in mapping.TEST_COLLECTION_MAPPING:
            wanted.update(mapping.TEST_COLLECTION_MAPPING[name])
        elif name in mapping.TEST_FILE_MAPPING:
            wanted.add(name)
        else:
            known = sorted(set(mapping.TEST_COLLECTION_MAPPING) | set(mapping.TEST_FILE_MAPPING))
            raise ValueError(f"unknown BFCL category {name!r}; known: {', '.join(known)}")
    return [c for c in all_categories() if c in wanted]


def category_kind(category: str) -> Kind:
    if category.startswith("multi_turn"):
        return "multi_turn"
    if "relevance" in category:  # irrelevance, live_irrelevance, live_relevance
        return "relevance"
    return "ast"


def category_language(category: str) -> str:
    """The `language` argument of BFCL's AST checker."""
    return {"java": "Java", "javascript": "JavaScript"}.get(category, "Python")


@dataclasses.dataclass(frozen=True)
class BfclExample:
    """One BFCL test entry.

    Attributes:
      id: BFCL's id ("simple_0", "live_multiple_3-1-0", "multi_turn_base_7").
      category: its category.
      turns: the user (and system) messages of each turn; one turn outside multi_turn.
      functions: BFCL function docs offered from the start (multi-turn: without held-out ones).
      held_out: multi_turn_miss_func only: turn index -> docs first offered at that turn.
      ground_truth: the possible answers (ast), the per-turn call strings (multi_turn), or None
        (relevance categories have no answer file).
      entry: the raw BFCL entry, which the multi-turn checker reads (initial_config, ...).
    """

    id: str
    category: str
    turns: list[list[Message]]
    functions: list[dict[str, Any]]
    held_out: dict[int, list[dict[str, Any]]]
    ground_truth: Any
    entry: dict[str, Any]

    @property
    def kind(self) -> Kind:
        return category_kind(self.category)


def _read_jsonl(path: pathlib.Path) -> list[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@functools.cache
def multi_turn_docs(class_name: str) -> tuple[dict[str, Any], ...]:
    """The function docs of one of BFCL's simulated API classes (e.g. "GorillaFileSystem")."""
    filename = _bfcl_categories().MULTI_TURN_FUNC_DOC_FILE_MAPPING[class_name]
    return tuple(_read_jsonl(data_dir() / "multi_turn_func_doc" / filename))


@functools.cache
def dataset_size(category: str) -> int:
    """Entries in a category's question file (BFCL counts an unevaluated category at this size)."""
    return len(_read_jsonl(data_dir() / _bfcl_categories().TEST_FILE_MAPPING[category]))


def load_category(category: str, limit: int | None = None) -> list[BfclExample]:
    """The first `limit` (all if None) entries of `category`, in file order."""
    filename = _bfcl_categories().TEST_FILE_MAPPING[category]
    entries = _read_jsonl(data_dir() / filename)[:limit]
    answers: dict[str, Any] = {}
    answer_file = data_dir() / "possible_answer" / filename
    if answer_file.exists():
        answers = {a["id"]: a["ground_truth"] for a in _read_jsonl(answer_file)}
    return [_example(category, entry, answers.get(entry["id"])) for entry in entries]


def _example(category: str, entry: dict[str, Any], ground_truth: Any) -> BfclExample:
    entry = copy.deepcopy(entry)
    held_out: dict[int, list[dict[str, Any]]] = {}
    if category_kind(category) == "multi_turn":
        # Multi-turn entries name their API classes; the docs come from the class doc files,
        # minus the functions that miss_func holds back until a later turn (BFCL does the same
        # in its generation step).
        functions = [dict(d) for c in entry["involved_classes"] for d in multi_turn_docs(c)]
        for turn, names in entry.get("missed_function", {}).items():
            held_out[int(turn)] = [d for d in functions if d["name"] in names]
            functions = [d for d in functions if d["name"] not in names]
    else:
        functions = entry["function"]
    if category_kind(category) != "relevance" and ground_truth is None:
        raise ValueError(f"{entry['id']}: no possible answer in the BFCL data")
    return BfclExample(
        id=entry["id"],
        category=category,
        turns=entry["question"],
        functions=functions,
        held_out=held_out,
        ground_truth=ground_truth,
        entry=entry,
    )


# ---- tools as the model sees them -------------------------------------------------------------

# BFCL type names -> JSON-schema types. Java and JavaScript parameters are shown as strings (the
# checker parses their string values with its own type converters); "any" also becomes a string,
# as in BFCL's conversion for OpenAI-style tools.
_JSON_TYPES = {
    "dict": "object", "object": "object", "HashMap": "object", "Hashtable": "object",
    "list": "array", "array": "array", "tuple": "array", "ArrayList": "array", "Array": "array",
    "Queue": "array", "Stack": "array",
    "float": "number", "number": "number", "double": "number",
    "integer": "integer", "byte": "integer", "short": "integer", "long": "integer",
    "Bigint": "integer",
    "string": "string", "String": "string", "char": "string", "any": "string", "Any": "string",
    "boolean": "boolean", "bool": "boolean",
}
_LANGUAGE_NOTE = {
    "Python": " Note that the provided function is in Python 3 syntax.",
    "Java": " Note that the provided function is in Java 8 SDK syntax.",
    "JavaScript": " Note that the provided function is in JavaScript syntax.",
}


def _json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """A BFCL parameter schema with JSON-schema types, recursively (other keys kept)."""
    out = dict(schema)
    if "type" in out:
        out["type"] = _JSON_TYPES.get(out["type"], "string")
    if isinstance(out.get("properties"), dict):
        out["properties"] = {k: _json_schema(v) for k, v in out["properties"].items()}
    if isinstance(out.get("items"), dict):
        out["items"] = _json_schema(out["items"])
    return out


def _as_string_parameter(schema: dict[str, Any], language: str) -> dict[str, Any]:
    """A Java/JavaScript parameter as a string whose description names its real type."""
    declared = schema.get("type", "any")
    note = f" This is a {language} {declared} value written as a string."
    if "items" in schema:
        note += f" Its elements are of type {schema['items'].get('type')}."
    if isinstance(schema.get("properties"), dict):
        note += f" Its entries follow this schema: {json.dumps(schema['properties'])}."
    kept = {k: v for k, v in schema.items() if k not in ("type", "items", "properties")}
    kept["description"] = schema.get("description", "") + note
    return {"type": "string", **kept}


def openai_tools(functions: Sequence[dict[str, Any]], category: str) -> list[dict[str, Any]]:
    """BFCL function docs as OpenAI tools for the chat template (names kept, dots included).

    Multi-turn docs also describe each function's response; that schema is left out, as it is
    for OpenAI-style tools, which keeps the long multi-turn prompts shorter.
    """
    language = category_language(category)
    tools = []
    for doc in functions:
        params = dict(doc.get("parameters") or {})
        properties = params.get("properties") or {}
        if language == "Python":
            properties = {k: _json_schema(v) for k, v in properties.items()}
        else:
            properties = {k: _as_string_parameter(v, language) for k, v in properties.items()}
        params.update(type="object", properties=properties)
        function = {
            "name": doc["name"],
            "description": doc.get("description", "") + _LANGUAGE_NOTE[language],
            "parameters": params,
        }
        tools.append({"type": "function", "function": function})
    return tools
