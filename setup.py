"""Package list for setuptools (everything else is in pyproject.toml).

Here only because pyproject's `[tool.setuptools.packages.find]` cannot add packages that live
elsewhere: the top-level recipes/ and sweeps/ folders install as `ablate.recipes` and
`ablate.sweeps` (mapped by `[tool.setuptools.package-dir]` in pyproject.toml), so `pip install`
ships the recipes and launch profiles next to the code (ablate/shipped.py reads them).
"""

from setuptools import find_packages, setup

SHIPPED = ["ablate.recipes", "ablate.recipes.trainers", "ablate.sweeps"]

setup(packages=[*find_packages(include=["ablate*", "trainer*"]), *SHIPPED])
