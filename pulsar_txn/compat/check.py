"""The migration checker: reads Python programs written for pulsar-client and says, call by call,
what will happen when they run on ``pulsar_txn.compat``, without running them.

``python -m pulsar_txn.compat.check FILE_OR_DIR...`` (or ``pulsar-txn migrate-check``) prints one line
per finding, ``path:line:col: kind: message``, and a summary. Kinds:

* ``import``: the line to change (``import pulsar`` -> ``import pulsar_txn.compat as pulsar``);
* ``change``: another change the program needs (``Client(...)`` must say where Kafka is);
* ``ignored``: an option accepted with no effect here (a tuning knob of Pulsar's own client);
* ``note``: works, with a remark (e.g. ``pulsar.schema.Record`` classes stay pulsar-client's);
* ``check``: an unsupported option whose value the checker cannot see: it fails at run time
  unless the value is pulsar-client's default;
* ``unsupported``: an option or call that raises ``OperationNotSupported`` / ``NotAllowedError``
  at run time (an option only when set to something other than its default);
* ``missing``: a name of the ``pulsar`` module that ``pulsar_txn.compat`` does not have, or a call
  with more positional arguments than pulsar-client takes.

Exit status 1 if any ``unsupported``, ``missing`` or ``error`` finding, else 0. The checker follows
names bound by ``import pulsar`` / ``from pulsar import ...``; method calls (``create_producer``,
``subscribe``, ``send``...) are matched by name in files that import pulsar.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from pulsar_txn import compat
from pulsar_txn.compat import _api, _params
from pulsar_txn.compat import asyncio as _compat_asyncio

_UNSUPPORTED_MEMBERS = {
    ("ConsumerType", "Shared"): "Shared subscriptions are not supported (Exclusive and Failover are)",
    ("ConsumerType", "KeyShared"): "Key_Shared subscriptions are not supported (Exclusive and Failover are)",
    ("schema", "ProtobufNativeSchema"): _params.PROTOBUF_UNSUPPORTED,
}
RECORD_NAMES = frozenset(
    {"Record", "Field", "String", "Integer", "Long", "Float", "Double", "Boolean", "Bytes", "Array"}
    | {"Map", "CustomEnum", "Null"}
)
"""pulsar.schema's record-definition names: keep importing them from pulsar-client."""
FAILING = frozenset({"unsupported", "missing", "error"})
"""The kinds of finding that mean the program fails on pulsar_txn.compat as written."""
_UNSUPPORTED_NAMES = {
    **_params.UNSUPPORTED_CLASSES,
    "functions": "Pulsar Functions are not part of this library",
    "Function": "Pulsar Functions are not part of this library",
}


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    col: int
    kind: str
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}:{self.col}: {self.kind}: {self.message}"


class _Visitor(ast.NodeVisitor):
    def __init__(self, path: str) -> None:
        self.path = path
        self.findings: list[Finding] = []
        self.modules: set[str] = set()  # names bound to the pulsar module
        self.schema_modules: set[str] = set()  # names bound to pulsar.schema
        self.exception_modules: set[str] = set()  # names bound to pulsar.exceptions
        self.names: dict[str, str] = {}  # local name -> name in the pulsar module
        self.noted: set[str] = set()
        self.starred: set[str] = set()  # names a star import bound, not checked yet (at first use)
        self.own: set[str] = set()  # names the program binds itself (see _bound_names)

    def add(self, node: ast.AST, kind: str, message: str) -> None:
        self.findings.append(
            Finding(self.path, getattr(node, "lineno", 0), getattr(node, "col_offset", 0) + 1, kind, message)
        )

    # --- imports
    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if alias.name == "pulsar":
                self.modules.add(alias.asname or "pulsar")
                self.add(node, "import", f"use `import pulsar_txn.compat as {alias.asname or 'pulsar'}`")
            elif alias.name == "pulsar.asyncio":
                # ``import pulsar.asyncio`` binds ``pulsar``; ``... as x`` binds the asyncio module,
                # whose names (Client, ...) take the same arguments as the pulsar module's.
                self.modules.add(alias.asname or "pulsar")
                self.add(node, "import", "use `import pulsar_txn.compat.asyncio` for `pulsar.asyncio`")
            elif alias.name == "pulsar.exceptions":
                if alias.asname:
                    self.exception_modules.add(alias.asname)
                else:
                    self.modules.add("pulsar")
                self.add(node, "import", "use `pulsar_txn.compat.exceptions` for `pulsar.exceptions`")
            elif alias.name == "pulsar.schema":
                if alias.asname:
                    self.schema_modules.add(alias.asname)
                else:
                    self.modules.add("pulsar")
                self.add(node, "import", "use `pulsar_txn.compat.schema` for `pulsar.schema`")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module not in ("pulsar", "pulsar.schema", "pulsar.asyncio", "pulsar.exceptions"):
            return
        target = {
            "pulsar": "pulsar_txn.compat",
            "pulsar.schema": "pulsar_txn.compat.schema",
            "pulsar.exceptions": "pulsar_txn.compat.exceptions",
        }.get(node.module, "pulsar_txn.compat.asyncio")
        self.add(node, "import", f"use `from {target} import ...`")
        for alias in node.names:
            if alias.name == "*":
                self._star(node.module)
                continue
            local = alias.asname or alias.name
            if node.module == "pulsar" and alias.name in ("schema", "asyncio", "exceptions"):
                {"schema": self.schema_modules, "asyncio": self.modules}.get(
                    alias.name, self.exception_modules
                ).add(local)
                continue
            qualified = {
                "pulsar.schema": f"schema.{alias.name}",
                "pulsar.exceptions": f"exceptions.{alias.name}",
            }.get(node.module, alias.name)
            self.names[local] = qualified
            self._check_name(node, qualified)

    def _star(self, module: str) -> None:
        """``from pulsar.X import *`` (pulsar-client's schema examples do it): the names compat has
        are taken as imported, so their uses are checked (``visit_Name``); a use of one it lacks is
        not reported (before, the ``*`` itself was reported missing and the verdict was FAILS for a
        program that runs)."""
        source, prefix = {
            "pulsar.schema": (compat.schema, "schema."),
            "pulsar.exceptions": (compat.exceptions, "exceptions."),
            "pulsar.asyncio": (_compat_asyncio, ""),
        }.get(module, (compat, ""))
        names = set(getattr(source, "__all__", ()))
        if module == "pulsar.schema":
            names |= RECORD_NAMES
        for name in names:
            if name not in self.names and name not in self.own:
                self.names[name] = prefix + name
                self.starred.add(name)

    def visit_Name(self, node: ast.Name) -> None:
        """A star-imported name is checked at its first use, as an imported one is at its import
        (before, ``AuthenticationTLS`` after ``from pulsar import *`` was never reported)."""
        if node.id in self.starred and isinstance(node.ctx, ast.Load):
            self.starred.discard(node.id)
            self._check_name(node, self.names[node.id])

    # --- names and attributes
    def _pulsar_path(self, node: ast.expr) -> str | None:
        """``pulsar.X.Y`` -> ``"X.Y"`` for expressions rooted at the pulsar module or its names."""
        parts: list[str] = []
        while isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name):
            return None
        if node.id in self.modules:
            return ".".join(reversed(parts)) if parts else ""
        if node.id in self.schema_modules:
            return ".".join(["schema", *reversed(parts)])
        if node.id in self.exception_modules:
            return ".".join(["exceptions", *reversed(parts)])
        if node.id in self.names:
            return ".".join([self.names[node.id], *reversed(parts)])
        return None

    def _check_name(self, node: ast.AST, qualified: str) -> None:
        parts = qualified.removeprefix("asyncio.").split(".")
        if len(parts) >= 2 and parts[0] == "schema" and parts[1] in RECORD_NAMES:
            if parts[1] not in self.noted:
                self.noted.add(parts[1])
                self.add(
                    node,
                    "note",
                    f"pulsar.schema.{parts[1]}: record classes stay pulsar-client's (keep it installed and"
                    " import them from pulsar.schema); compat's AvroSchema / JsonSchema take them",
                )
            return
        if parts[0] in _UNSUPPORTED_NAMES:
            self.add(node, "unsupported", f"pulsar.{parts[0]}: {_UNSUPPORTED_NAMES[parts[0]]}")
            return
        if len(parts) >= 2 and (parts[0], parts[1]) in _UNSUPPORTED_MEMBERS:
            self.add(
                node,
                "unsupported",
                f"pulsar.{parts[0]}.{parts[1]}: {_UNSUPPORTED_MEMBERS[parts[0], parts[1]]}",
            )
            return
        obj: object = compat
        for part in parts[:2]:
            if not hasattr(obj, part) and not (obj is compat and hasattr(_compat_asyncio, part)):
                self.add(
                    node, "missing", f"pulsar.{'.'.join(parts[:2])} has no equivalent in pulsar_txn.compat"
                )
                return
            obj = getattr(obj, part)

    def visit_Attribute(self, node: ast.Attribute) -> None:
        path = self._pulsar_path(node)
        if path:
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name):
                self.starred.discard(root.id)  # checked here, with its attribute: not again at a call
            self._check_name(node, path)
            return  # the whole chain is checked; do not visit its prefixes again
        self.generic_visit(node)

    # --- calls
    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        path = self._pulsar_path(func)
        if path in ("Client", "asyncio.Client"):
            self._check_args(node, _params.CLIENT)
            url = _argument(node, 0, "service_url")
            if isinstance(url, ast.Constant) and isinstance(url.value, str):
                try:
                    _api._check_service_url(url.value)
                except _params.OperationNotSupported as exc:
                    self.add(url, "unsupported", f"Client(service_url=...): {exc}")
            if not any(kw.arg in ("bootstrap_servers", "kafka") or kw.arg is None for kw in node.keywords):
                self.add(
                    node, "change", "Client(...) needs where Kafka is: bootstrap_servers=... or kafka={...}"
                )
        elif path == "schema.AvroSchema" or path == "schema.JsonSchema":
            pass
        elif path == "ConsumerDeadLetterPolicy":
            initial = _argument(node, 2, "initial_subscription_name")
            if initial is not None:
                known = _static_value(initial, (None,), self)
                if known is not True:
                    self.add(
                        initial,
                        "unsupported" if known is False else "check",
                        "ConsumerDeadLetterPolicy(initial_subscription_name=...) raises "
                        "OperationNotSupported at subscribe unless None",
                    )
        elif isinstance(func, ast.Attribute) and self.modules | self.names.keys() | self.schema_modules:
            table = _params.TABLES.get(func.attr) if func.attr != "Client" else None  # methods only
            first = node.args[0] if node.args else None
            if (
                func.attr in ("send", "send_async")
                and isinstance(first, ast.Constant)
                and first.value is None
            ):
                # Matched by name only: it may be a generator's send(None), so not a failing kind.
                self.add(
                    first,
                    "check",
                    f"{func.attr}(None): if this is a producer, null values (tombstones) raise "
                    "OperationNotSupported",
                )
            if table is not None:
                self._check_args(node, table, strict=func.attr not in ("send", "send_async", "subscribe"))
            elif func.attr in _params.UNSUPPORTED_CALLS:
                self.add(node, "unsupported", f"{func.attr}(): {_params.UNSUPPORTED_CALLS[func.attr]}")
        self.generic_visit(node)

    def _check_args(self, node: ast.Call, table: _params.CallTable, strict: bool = True) -> None:
        leading = len(table.leading)
        extra = [a for a in node.args[leading:] if not isinstance(a, ast.Starred)]
        if len(extra) > len(table.order):
            self.add(
                node,
                "missing",
                f"{table.call}() takes at most {leading + len(table.order)} positional arguments",
            )
        named = [(name, value) for name, value in zip(table.order, extra, strict=False)]
        named += [(kw.arg, kw.value) for kw in node.keywords if kw.arg is not None]  # **options: unknowable
        for arg, value in named:
            status = table.status(arg)
            if status == "ignored":
                self.add(value, "ignored", f"{table.call}({arg}=...) has no effect here")
            elif status == "unsupported":
                allowed = table.unsupported[arg]
                known = _static_value(value, allowed, self)
                if known is True:
                    continue
                why = table.notes.get(arg, "no equivalent on Kafka in this library")
                self.add(
                    value,
                    "unsupported" if known is False else "check",
                    f"{table.call}({arg}=...) raises OperationNotSupported unless at its default: {why}",
                )
            elif status == "unknown" and strict and arg not in _params.NATIVE_CLIENT_OPTIONS:
                self.add(value, "missing", f"{table.call}() has no parameter {arg!r}")


def _argument(node: ast.Call, index: int, name: str) -> ast.expr | None:
    """The expression a call passes for a parameter, by position or by keyword (None if neither)."""
    if len(node.args) > index:
        return node.args[index]
    return next((kw.value for kw in node.keywords if kw.arg == name), None)


def _static_value(node: ast.expr, allowed: tuple[object, ...], visitor: _Visitor) -> bool | None:
    """Whether ``node`` is one of the "off" values: True / False when it is a constant or a pulsar
    enum member, None when the checker cannot see the value (a variable, a call...)."""
    if isinstance(node, ast.Constant):
        return any(node.value is a or node.value == a for a in allowed)
    if isinstance(node, ast.Call | ast.Lambda | ast.Dict | ast.List | ast.Tuple | ast.JoinedStr):
        return False  # a made value is never None / False / a default enum member
    path = visitor._pulsar_path(node) if isinstance(node, ast.Attribute) else None
    if path is None:
        return None
    return path.rsplit(".", 1)[-1] in [a for a in allowed if isinstance(a, str)]


def check_source(source: str, path: str = "<string>") -> list[Finding]:
    """The findings for one program's source text (a syntax error is one finding of kind ``error``)."""
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as exc:
        return [Finding(path, exc.lineno or 0, exc.offset or 0, "error", f"not valid Python: {exc.msg}")]
    visitor = _Visitor(path)
    visitor.own = _bound_names(tree)
    visitor.visit(tree)
    return sorted(visitor.findings, key=lambda f: (f.line, f.col, f.kind))


def _bound_names(tree: ast.AST) -> set[str]:
    """Names the program binds itself anywhere (assignments, definitions, parameters, imports of
    other modules): a star-imported name it rebinds is its own, not pulsar's."""
    own: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            own.add(node.id)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            own.add(node.name)
        elif isinstance(node, ast.arg):
            own.add(node.arg)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            own.add(node.name)
        elif isinstance(node, ast.Import | ast.ImportFrom) and not _is_pulsar_import(node):
            own.update((a.asname or a.name).split(".")[0] for a in node.names if a.name != "*")
    return own


def _is_pulsar_import(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.ImportFrom):
        return (node.module or "").split(".")[0] == "pulsar"
    return any(a.name.split(".")[0] == "pulsar" for a in node.names)


def _files(paths: Sequence[str]) -> Iterator[Path]:
    for name in paths:
        p = Path(name)
        if p.is_dir():
            yield from sorted(q for q in p.rglob("*.py") if ".venv" not in q.parts)
        else:
            yield p


def check_paths(paths: Sequence[str]) -> list[Finding]:
    """The findings for files and directories (``*.py`` under them)."""
    out: list[Finding] = []
    for path in _files(paths):
        try:
            source = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            out.append(Finding(str(path), 0, 0, "error", f"cannot read: {exc}"))
            continue
        out.extend(check_source(source, str(path)))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="pulsar-txn migrate-check",
        description="Report what a program written for pulsar-client does on pulsar_txn.compat.",
    )
    parser.add_argument("paths", nargs="+", help="Python files or directories")
    parser.add_argument("--json", action="store_true", help="print the findings as a JSON list")
    args = parser.parse_args(argv)
    findings = check_paths(args.paths)
    failing = [f for f in findings if f.kind in FAILING]
    if args.json:
        print(json.dumps([asdict(f) for f in findings], indent=2))
    else:
        for f in findings:
            print(f)
        kinds = ("import", "change", "ignored", "note", "check", "unsupported", "missing", "error")
        counts = {k: sum(f.kind == k for f in findings) for k in kinds}
        print(
            ", ".join(f"{n} {k}" for k, n in counts.items()),
            "-",
            "FAILS" if failing else "runs on pulsar_txn.compat",
        )
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
