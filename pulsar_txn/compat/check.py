"""The migration checker: reads Python programs written for pulsar-client and says, call by call,
what will happen when they run on ``pulsar_txn.compat``, without running them.

``python -m pulsar_txn.compat.check FILE_OR_DIR...`` (or ``pulsar-txn migrate-check``) prints one line
per finding, ``path:line:col: kind: message``, and a summary. Kinds:

* ``import``: the line to change (``import pulsar`` -> ``import pulsar_txn.compat as pulsar``);
* ``ignored``: an option accepted with no effect here (a tuning knob of Pulsar's own client);
* ``unsupported``: an option or call that raises ``OperationNotSupported`` / ``NotAllowedError``
  at run time (an option only when set to something other than its default);
* ``missing``: a name of the ``pulsar`` module that ``pulsar_txn.compat`` does not have.

Exit status 1 if any ``unsupported`` or ``missing`` finding is certain, else 0. The checker follows
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
from pulsar_txn.compat import _params
from pulsar_txn.compat import asyncio as _compat_asyncio

_METHOD_TABLES = {
    "create_producer": _params.CREATE_PRODUCER,
    "subscribe": _params.SUBSCRIBE,
    "create_reader": _params.CREATE_READER,
    "send": _params.SEND,
    "send_async": _params.SEND_ASYNC,
}
_UNSUPPORTED_MEMBERS = {
    ("ConsumerType", "Shared"): "Shared subscriptions are not supported (Exclusive and Failover are)",
    ("ConsumerType", "KeyShared"): "Key_Shared subscriptions are not supported (Exclusive and Failover are)",
    ("schema", "ProtobufNativeSchema"): "no Protobuf schema (bytes, string, JSON and Avro are supported)",
}
_UNSUPPORTED_NAMES = {
    "AuthenticationTLS": "only AuthenticationToken is supported",
    "AuthenticationAthenz": "only AuthenticationToken is supported",
    "AuthenticationOauth2": "only AuthenticationToken is supported",
    "AuthenticationBasic": "only AuthenticationToken is supported",
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
        self.names: dict[str, str] = {}  # local name -> name in the pulsar module

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
            elif alias.name == "pulsar.schema":
                if alias.asname:
                    self.schema_modules.add(alias.asname)
                else:
                    self.modules.add("pulsar")
                self.add(node, "import", "use `pulsar_txn.compat.schema` for `pulsar.schema`")

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.module not in ("pulsar", "pulsar.schema", "pulsar.asyncio"):
            return
        target = {"pulsar": "pulsar_txn.compat", "pulsar.schema": "pulsar_txn.compat.schema"}.get(
            node.module, "pulsar_txn.compat.asyncio"
        )
        self.add(node, "import", f"use `from {target} import ...`")
        for alias in node.names:
            local = alias.asname or alias.name
            if node.module == "pulsar" and alias.name in ("schema", "asyncio"):
                (self.schema_modules if alias.name == "schema" else self.modules).add(local)
                continue
            qualified = f"schema.{alias.name}" if node.module == "pulsar.schema" else alias.name
            self.names[local] = qualified
            self._check_name(node, qualified)

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
        if node.id in self.names:
            return ".".join([self.names[node.id], *reversed(parts)])
        return None

    def _check_name(self, node: ast.AST, qualified: str) -> None:
        parts = qualified.removeprefix("asyncio.").split(".")
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
            self._check_name(node, path)
            return  # the whole chain is checked; do not visit its prefixes again
        self.generic_visit(node)

    # --- calls
    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        path = self._pulsar_path(func)
        if path in ("Client", "asyncio.Client"):
            self._check_args(node, _params.CLIENT)
        elif path == "schema.AvroSchema" or path == "schema.JsonSchema":
            pass
        elif isinstance(func, ast.Attribute) and self.modules | self.names.keys() | self.schema_modules:
            table = _METHOD_TABLES.get(func.attr)
            if table is not None:
                self._check_args(node, table, strict=func.attr not in ("send", "send_async", "subscribe"))
            elif func.attr in _params.UNSUPPORTED_CALLS:
                self.add(node, "unsupported", f"{func.attr}(): {_params.UNSUPPORTED_CALLS[func.attr]}")
            elif func.attr == "seek" and node.args and _is_int_literal(node.args[0]):
                self.add(node, "unsupported", "seek(<publish time>): only seek to a MessageId is supported")
        self.generic_visit(node)

    def _check_args(self, node: ast.Call, table: _params.CallTable, strict: bool = True) -> None:
        for kw in node.keywords:
            if kw.arg is None:
                continue  # **options: not checkable statically
            status = table.status(kw.arg)
            if status == "ignored":
                self.add(kw.value, "ignored", f"{table.call}({kw.arg}=...) has no effect here")
            elif status == "unsupported":
                allowed = table.unsupported[kw.arg]
                if _static_default(kw.value, allowed, self):
                    continue
                why = table.notes.get(kw.arg, "no equivalent on Kafka in this library")
                self.add(
                    kw.value,
                    "unsupported",
                    f"{table.call}({kw.arg}=...) raises OperationNotSupported unless at its default: {why}",
                )
            elif status == "unknown" and strict and kw.arg not in ("bootstrap_servers", "kafka"):
                self.add(kw.value, "missing", f"{table.call}() has no parameter {kw.arg!r}")


def _is_int_literal(node: ast.expr) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool)


def _static_default(node: ast.expr, allowed: tuple[object, ...], visitor: _Visitor) -> bool:
    """Whether ``node`` is visibly one of the "off" values (a constant, or an enum member by name)."""
    if isinstance(node, ast.Constant):
        return any(node.value is a or node.value == a for a in allowed)
    path = visitor._pulsar_path(node) if isinstance(node, ast.Attribute) else None
    return path is not None and path.rsplit(".", 1)[-1] in [a for a in allowed if isinstance(a, str)]


def check_source(source: str, path: str = "<string>") -> list[Finding]:
    """The findings for one program's source text (a syntax error is one finding of kind ``error``)."""
    try:
        tree = ast.parse(source, filename=path)
    except SyntaxError as exc:
        return [Finding(path, exc.lineno or 0, exc.offset or 0, "error", f"not valid Python: {exc.msg}")]
    visitor = _Visitor(path)
    visitor.visit(tree)
    return sorted(visitor.findings, key=lambda f: (f.line, f.col, f.kind))


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
    failing = [f for f in findings if f.kind in ("unsupported", "missing", "error")]
    if args.json:
        print(json.dumps([asdict(f) for f in findings], indent=2))
    else:
        for f in findings:
            print(f)
        counts = {
            k: sum(f.kind == k for f in findings)
            for k in ("import", "ignored", "unsupported", "missing", "error")
        }
        print(
            ", ".join(f"{n} {k}" for k, n in counts.items()),
            "-",
            "FAILS" if failing else "runs on pulsar_txn.compat",
        )
    return 1 if failing else 0


if __name__ == "__main__":
    sys.exit(main())
