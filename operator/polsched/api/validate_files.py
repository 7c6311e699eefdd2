"""`polsched validate FILE|DIR...`: check SchedulingPolicy manifests offline.

Each SchedulingPolicy document goes through the CRD's openAPIV3Schema (crds/, via
polsched.api.crd; JSON Schema ignores the x-kubernetes-* keys and the CEL rules) and then
through the loader, which checks everything the CEL rules and the webhook check, and
more. Problems print one per line as `file:line:column: path: message`, so editors and
CI annotate them like compiler errors: the line of the field the path names (its key, or
its list item), else of the nearest enclosing field the file has (a missing required
field points at its parent), found on the YAML node tree, whose nodes keep their marks.
`-o json|yaml` prints the same problems as objects. Documents of other kinds are skipped,
so a directory of mixed manifests can be checked as it is.
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import jsonschema
import yaml

from polsched.api import crd
from polsched.api.loader import is_policy_object, load_policy
from polsched.api.model import FieldError, PolicyError
from polsched.framework.registry import Catalog

YAML_SUFFIXES = (".yaml", ".yml")
STDIN = "-"


class _StrictLoader(yaml.CSafeLoader):
    """SafeLoader that refuses duplicate keys, as kubectl's YAML decoder does: with
    PyYAML's default the last one silently wins and half a policy disappears. libyaml's
    parser (PyYAML's wheels carry it) composes the node tree, with the same marks, 2.6x
    faster than the pure-Python one: the fuzzer timed out `polsched validate` on a 1.7 MB
    policy (6.3 s of CPU; 2.4 s with it)."""


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    loader.flatten_mapping(node)
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node, deep=True)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark,
                f"found duplicate key {key!r}", key_node.start_mark)
        seen.add(key)
    return dict(loader.construct_mapping(node, deep=True))


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


@dataclass(frozen=True)
class Problem:
    file: str
    doc: int | None   # the YAML document's index from 0; None: the file as a whole
    path: str
    message: str
    line: int | None = None    # from 1; None: the file could not be read at all
    column: int | None = None  # from 1

    @property
    def one_line_message(self) -> str:
        # One problem per line, whatever the message (CEL parse errors span lines).
        return " ".join(line.strip() for line in self.message.splitlines() if line.strip())

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}:{self.column or 1}"
        if self.doc is None:
            return f"{where}: {self.one_line_message}"
        return f"{where}: {self.path or '.'}: {self.one_line_message}"

    def to_json(self) -> dict[str, Any]:
        return {"file": self.file, "line": self.line, "column": self.column,
                "document": self.doc, "path": self.path, "message": self.message}


# A field path's next step: `[3]` in a list, `.key` or `key` in a mapping.
_INDEX = re.compile(r"\[(\d+)\]\.?")


def locate(node: yaml.Node | None, path: str) -> yaml.Mark | None:
    """The mark of the field `path` names in the document `node` (its key's, or its list
    item's), or of the deepest field on the way that the document has. Keys may hold dots
    (a label key): at each mapping the longest key that prefixes the rest is taken."""
    if node is None:
        return None
    mark: yaml.Mark = node.start_mark
    rest = path
    while rest:
        if isinstance(node, yaml.SequenceNode):
            m = _INDEX.match(rest)
            if m is None or int(m[1]) >= len(node.value):
                break
            node = node.value[int(m[1])]
            mark, rest = node.start_mark, rest[m.end():]
        elif isinstance(node, yaml.MappingNode):
            best: tuple[yaml.Node, yaml.Node] | None = None
            for k, v in node.value:
                key = k.value if isinstance(k, yaml.ScalarNode) else None
                if isinstance(key, str) and rest.startswith(key) and (
                        len(rest) == len(key) or rest[len(key)] in ".[") and (
                        best is None or len(key) > len(best[0].value)):
                    best = (k, v)
            if best is None:
                break
            mark, node = best[0].start_mark, best[1]
            rest = rest[len(best[0].value):].removeprefix(".")
        else:
            break
    return mark


def _format_path(parts: Iterable[Any]) -> str:
    out = ""
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += f".{p}" if out else str(p)
    return out


def _schema_message(err: jsonschema.ValidationError) -> str:
    # jsonschema quotes the whole offending value; for long strings and lists say what
    # the limit is instead.
    v, limit = err.validator, err.validator_value
    if v == "maxLength":
        return f"must be at most {limit} characters"
    if v == "minLength":
        return f"must be at least {limit} characters" if limit != 1 else "must not be empty"
    if v == "maxItems":
        return f"must have at most {limit} items"
    if v == "enum":
        return f"unsupported value {err.instance!r}: must be one of " + ", ".join(map(str, limit))
    if v == "type":
        return f"must be of type {limit}"
    return str(err.message)


@functools.cache
def _validator() -> jsonschema.protocols.Validator:
    # The openAPIV3Schema is a subset of draft 4 (boolean exclusiveMinimum, no $schema).
    return jsonschema.Draft4Validator(crd.openapi_schema())


def _required_errors(err: jsonschema.ValidationError, path: str) -> list[FieldError]:
    missing = [p for p in err.validator_value
               if isinstance(err.instance, Mapping) and p not in err.instance]
    return [FieldError(f"{path}.{p}" if path else p, "required") for p in missing]


def _document_order(err: jsonschema.ValidationError) -> list[tuple[int, int, str]]:
    return [(0, p, "") if isinstance(p, int) else (1, 0, str(p)) for p in err.absolute_path]


def pruned_nulls(value: Any, schema: Mapping[str, Any]) -> Any:
    """`value` as the API server validates it: a null in a field the schema declares and
    does not make `nullable` is dropped first (apiextensions prunes it before defaulting),
    so `spec: null` is admitted as no spec; unknown fields (preserved) keep theirs.
    Iterative: documents nest deep."""
    if not isinstance(value, Mapping | list):
        return value
    root: Any = {} if isinstance(value, Mapping) else []
    stack: list[tuple[Any, Mapping[str, Any], Any]] = [(value, schema, root)]
    while stack:
        src, sch, dst = stack.pop()
        if isinstance(src, Mapping):
            props = sch.get("properties") or {}
            extra = sch.get("additionalProperties")
            for k, v in src.items():
                sub = props.get(k, extra if isinstance(extra, Mapping) else None)
                if sub is None:  # an unknown field (preserved): kept as it is
                    sub = {}
                elif v is None and not sub.get("nullable"):
                    continue
                dst[k] = {} if isinstance(v, Mapping) else [] if isinstance(v, list) else v
                if isinstance(v, Mapping | list):
                    stack.append((v, sub, dst[k]))
        else:
            sub = sch.get("items") or {}
            for v in src:
                child = {} if isinstance(v, Mapping) else [] if isinstance(v, list) else v
                dst.append(child)
                if isinstance(v, Mapping | list):
                    stack.append((v, sub, child))
    return root


def schema_errors(obj: Mapping[str, Any]) -> list[FieldError]:
    """The CRD schema's complaints about one object, with kube-style field paths, after
    the API server's pruning of nulls (pruned_nulls)."""
    out: list[FieldError] = []
    obj = pruned_nulls(obj, crd.openapi_schema())
    for err in sorted(_validator().iter_errors(obj), key=_document_order):
        path = _format_path(err.absolute_path)
        if err.validator == "required":
            out.extend(_required_errors(err, path))
        else:
            out.append(FieldError(path, _schema_message(err)))
    return out


def _enclosing(path: str) -> list[str]:
    """`path` and every field path that contains it ("spec.a[1].b": itself, "spec.a[1]",
    "spec.a", "spec")."""
    return [path] + [path[:i] for i, c in enumerate(path) if c in ".[" and i > 0]


def check_policy(obj: Mapping[str, Any], catalog: Catalog) -> list[FieldError]:
    """Every problem of one SchedulingPolicy object: the loader's (they say what to do),
    then what only the schema caught (lengths, list sizes, status), one per field: a
    schema error is dropped when its path is a loader error's, or contains one, or is
    contained in one. Linear in the errors (a policy with 20,000 bad entries took 90 s
    comparing every pair)."""
    try:
        load_policy(obj, catalog)
        semantic: list[FieldError] = []
    except PolicyError as err:
        semantic = list(err.errors)
    named = {s.path for s in semantic}
    around = {p for s in semantic for p in _enclosing(s.path)}
    extra = [e for e in schema_errors(obj)
             if e.path not in around and not any(p in named for p in _enclosing(e.path))]
    return semantic + extra


def _policies(doc: Any) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(path prefix, object) of the policies in one document: the document itself, or
    the items of a v1 List (what `kubectl get spol -o yaml` prints)."""
    if is_policy_object(doc):
        yield "", doc
    elif isinstance(doc, Mapping) and doc.get("kind") == "List":
        items = doc.get("items")
        for i, item in enumerate(items if isinstance(items, list) else []):
            if is_policy_object(item):
                yield f"items[{i}].", item


def _describe(doc: Any) -> str:
    if isinstance(doc, Mapping):
        return f"kind {doc.get('kind')!r} apiVersion {doc.get('apiVersion')!r}"
    return f"not an object ({type(doc).__name__})"


@dataclass
class Report:
    problems: list[Problem]
    policies: int
    notes: list[str]


def documents(text: str) -> list[tuple[Any, yaml.Node | None]]:
    """Every YAML document of `text`, constructed (duplicate keys refused) and as the node
    tree it was built from (whose marks say where each field is)."""
    loader = _StrictLoader(text)
    out: list[tuple[Any, yaml.Node | None]] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            out.append((loader.construct_document(node), node))
    finally:
        loader.dispose()
    return out


def _line_col(mark: yaml.Mark | None) -> tuple[int | None, int | None]:
    return (None, None) if mark is None else (mark.line + 1, mark.column + 1)


def check_text(text: str, label: str, catalog: Catalog) -> Report:
    report = Report([], 0, [])
    try:
        docs = documents(text)
    except yaml.YAMLError as err:
        msg = " ".join(str(err).split())
        mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
        line, col = _line_col(mark) if mark is not None else (1, 1)
        report.problems.append(Problem(label, None, "", f"not YAML: {msg}", line, col))
        return report
    except RecursionError:  # PyYAML's composer recurses once per level
        report.problems.append(Problem(label, None, "", "not YAML this command can read: "
                                       "nested too deep"))
        return report
    for i, (doc, node) in enumerate(docs):
        if doc is None:
            continue
        found = False
        at, _ = _line_col(locate(node, ""))
        for prefix, obj in _policies(doc):
            found = True
            report.policies += 1
            name = (obj.get("metadata") or {}).get("name") if isinstance(
                obj.get("metadata"), Mapping) else None
            try:
                errs = check_policy(obj, catalog)
            except RecursionError:  # jsonschema recurses once per level
                errs = [FieldError("", "nested too deep to check against the CRD's schema")]
            for e in errs:
                line, col = _line_col(locate(node, prefix + e.path))
                report.problems.append(Problem(label, i, prefix + e.path, e.message,
                                               line, col))
            if not errs:
                line, _ = _line_col(locate(node, prefix.rstrip(".")))
                report.notes.append(f"{label}:{line}: {prefix or ''}SchedulingPolicy "
                                    f"{name!r} valid")
        if not found:
            report.notes.append(f"{label}:{at}: skipped: {_describe(doc)} is not a "
                                "SchedulingPolicy")
    return report


def expand(paths: Sequence[str]) -> tuple[list[str], list[Problem]]:
    """Files to check, in order: files as given, directories walked for *.yaml and *.yml
    (sorted, hidden directories skipped)."""
    files: list[str] = []
    problems: list[Problem] = []
    for p in paths:
        if p == STDIN:
            files.append(p)
            continue
        path = Path(p)
        if path.is_dir():
            for f in sorted(path.rglob("*")):
                rel = f.relative_to(path).parts
                if f.is_file() and f.suffix in YAML_SUFFIXES and not any(
                        part.startswith(".") for part in rel):
                    files.append(str(f))
        elif path.is_file():
            files.append(p)
        else:
            problems.append(Problem(p, None, "", "no such file or directory"))
    return files, problems


def run(paths: Sequence[str], catalog: Catalog, verbose: bool = False,
        out: TextIO = sys.stdout, stdin: TextIO = sys.stdin, fmt: str = "text") -> int:
    """Check `paths` against `catalog` (the plugins a policy may name; the caller's, the
    in-tree polsched.plugins.CATALOG for `polsched validate`); print problems (and,
    verbose, what was skipped), or with `fmt` json or yaml one object saying all of it;
    1 on any problem."""
    files, problems = expand(paths)
    policies = 0
    notes: list[str] = []
    for f in files:
        label = "<stdin>" if f == STDIN else f
        try:
            text = stdin.read() if f == STDIN else Path(f).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            problems.append(Problem(label, None, "", f"cannot read: {err}"))
            continue
        report = check_text(text, label, catalog)
        policies += report.policies
        problems.extend(report.problems)
        notes.extend(report.notes)
        if verbose and fmt == "text":
            for note in report.notes:
                print(note, file=out)
    if fmt != "text":
        doc: dict[str, Any] = {"policies": policies, "valid": not problems,
                               "problems": [p.to_json() for p in problems]}
        if verbose:
            doc["notes"] = notes
        if fmt == "yaml":
            out.write(yaml.safe_dump(doc, sort_keys=False, width=1 << 16))
        else:
            import json

            out.write(json.dumps(doc, indent=2) + "\n")
        return 1 if problems else 0
    for p in problems:
        print(p, file=out)
    if problems:
        print(f"{len(problems)} problem{'s' if len(problems) != 1 else ''} in "
              f"{policies} policies", file=out)
        return 1
    print(f"{policies} policies valid", file=out)
    return 0
