"""Print the package's import graph in figures: modules, arrows between them (imports of one module of
the package by another, run-time only), the floors (a module stands above everything it imports), and
the same at the scale of sub-packages, with the arrows that run back up a floor there.

    python scripts/import_graph.py [REPO]
"""

from __future__ import annotations

import ast
import sys
from functools import cache
from pathlib import Path


def modules(package: Path) -> dict[str, Path]:
    repo = package.parent
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(repo).with_suffix("").parts
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def arrows(found: dict[str, Path]) -> set[tuple[str, str]]:
    edges = set()
    for name, path in found.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
                node.body = []
        targets: list[str] = []
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets += [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([node.module] if node.module else [])])
                targets += [f"{base}.{a.name}" if f"{base}.{a.name}" in found else base for a in node.names]
        for target in targets:
            while target and target not in found:
                target = target.rpartition(".")[0]
            if target and target != name and target != "runner":
                edges.add((name, target))
    return edges


def floors(nodes: set[str], edges: set[tuple[str, str]]) -> dict[str, int]:
    out = {n: {b for a, b in edges if a == n and b != n} for n in nodes}

    @cache
    def floor(n: str, seen: frozenset[str] = frozenset()) -> int:
        below = [floor(m, seen | {n}) for m in out[n] if m not in seen and m != n]
        return 1 + max(below, default=0)

    return {n: floor(n) for n in nodes}


def group(name: str, packages: set[str]) -> str:
    """The room `name` stands in: its sub-package (one of `packages`), else itself."""
    parts = name.split(".")
    return ".".join(parts[:2]) if len(parts) > 2 or name in packages else name


def main() -> None:
    say = sys.stdout.write
    repo = Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    found = modules(repo / "runner")
    packages = {n for n in found if n.count(".") == 1 and found[n].name == "__init__.py"}
    edges = arrows(found)
    level = floors(set(found), edges)
    say(f"modules {len(found)}  arrows {len(edges)}  floors {max(level.values())}\n")
    rooms = {group(n, packages) for n in found}
    room_edges = {(group(a, packages), group(b, packages)) for a, b in edges}
    room_edges = {(a, b) for a, b in room_edges if a != b}
    room_level = floors(rooms, room_edges)
    back = sorted((a, b) for a, b in room_edges if room_level[b] >= room_level[a])
    top = max(room_level.values())
    say(f"rooms (sub-packages and top modules) {len(rooms)}  arrows {len(room_edges)}  floors {top}\n")
    for floor in range(top, 0, -1):
        standing = sorted(room for room in rooms if room_level[room] == floor)
        say(f"  floor {floor}: {', '.join(standing)}\n")
    say(f"arrows that run back up or across a floor: {len(back)}\n")
    for a, b in back:
        say(f"  {a} (floor {room_level[a]}) -> {b} (floor {room_level[b]})\n")


if __name__ == "__main__":
    main()
