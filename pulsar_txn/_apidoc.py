"""Builds the HTML API reference with pdoc (a dev dependency): ``python -m pulsar_txn._apidoc DIR``.

Only the public API is documented; internals (coordinator, buffer, protocol, ...) are not.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

PUBLIC_MODULES = [
    "pulsar_txn",
    "pulsar_txn.client",
    "pulsar_txn.transaction",
    "pulsar_txn.producer",
    "pulsar_txn.consumer",
    "pulsar_txn.reader",
    "pulsar_txn.message",
    "pulsar_txn.schema",
    "pulsar_txn.txnid",
    "pulsar_txn.errors",
    "pulsar_txn.admin",
    "pulsar_txn.asyncio",
    "pulsar_txn.compat",
]
"""The modules the reference covers, in navigation order."""


def _adopt_parts(cls: type) -> None:
    """``Consumer`` is put together from classes in private modules (``pulsar_txn.subscription._*``),
    whose members pdoc leaves out as inherited from undocumented modules. In the docs build only,
    their public methods are set on the class itself (the same functions: what runs is unchanged),
    so the reference lists them under ``Consumer``."""
    for base in cls.__mro__[1:]:
        if not base.__module__.startswith("pulsar_txn.subscription._"):
            continue
        for name, member in vars(base).items():
            if not name.startswith("_") and callable(member) and name not in vars(cls):
                setattr(cls, name, member)


def build(output: Path) -> list[str]:
    """Render the reference into ``output``; returns pdoc's warnings (empty when the build is clean)."""
    import pdoc
    import pdoc.render

    from pulsar_txn.consumer import Consumer

    _adopt_parts(Consumer)

    pdoc.render.configure(docformat="restructuredtext", footer_text="pulsar-txn API", search=True)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        pdoc.pdoc(*PUBLIC_MODULES, output_directory=output)
    return [str(w.message) for w in caught]


def main(argv: list[str]) -> int:
    output = Path(argv[0] if argv else "docs/api")
    problems = build(output)
    for problem in problems:
        print(f"warning: {problem}", file=sys.stderr)
    print(f"API docs: {output / 'index.html'} ({len(problems)} warnings)")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
