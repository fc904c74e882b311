"""No import cycle anywhere in the shipped packages (function-level imports included), checked on the
import graph grimp builds (the library import-linter runs on; the layer contract is in pyproject.toml)."""

from __future__ import annotations

import grimp  # installed with import-linter (the dev extra)
import networkx as nx

PACKAGES = ("core", "models", "firmware_bridge", "robot_app")


def _cycles(graph) -> list[list[str]]:
    """Strongly connected components of more than one module (networkx)."""
    g = nx.DiGraph()
    for m in graph.modules:
        g.add_node(m)
        g.add_edges_from((m, imp) for imp in graph.find_modules_directly_imported_by(m))
    return sorted(sorted(c) for c in nx.strongly_connected_components(g) if len(c) > 1)


def test_no_import_cycle_in_the_shipped_packages():
    graph = grimp.build_graph(*PACKAGES, cache_dir=None)
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle():
    g = grimp.ImportGraph()
    for m in ("a", "a.x", "a.y", "a.z"):
        g.add_module(m)
    g.add_import(importer="a.x", imported="a.y")
    g.add_import(importer="a.y", imported="a.x")
    g.add_import(importer="a.z", imported="a.x")
    assert _cycles(g) == [["a.x", "a.y"]]
