"""The pure part of the interpreter supply: the choice of zygote from the code's imports. No processes."""

from __future__ import annotations

from runner.execution.supply import imported_packages, wants_preloaded


def test_imports_are_found_in_every_spelling() -> None:
    code = (
        "import os, numpy as np\n"
        "from pandas.io import json\n"
        "  import matplotlib.pyplot as plt  # indented\n"
        "from . import sibling\n"
        "x = __import__('scipy.stats')\n"
        'importlib.import_module("sklearn")\n'
    )
    assert imported_packages(code) == {"os", "numpy", "pandas", "matplotlib", "scipy", "sklearn"}


def test_only_code_that_imports_beyond_the_standard_library_goes_to_the_preloading_zygote() -> None:
    preload = ("numpy", "pandas", "matplotlib.pyplot")
    assert not wants_preloaded(imported_packages("print(1)"), preload)
    assert not wants_preloaded(imported_packages("import json, os.path\nfrom collections import deque"), preload)
    assert not wants_preloaded(imported_packages("import mcp_tools, json"), preload), "code mode's own module"
    assert wants_preloaded(imported_packages("from matplotlib import pyplot"), preload)
    assert wants_preloaded(imported_packages("import scipy"), preload)  # a package: most likely built on numpy
    assert not wants_preloaded(imported_packages("import numpy"), ())
