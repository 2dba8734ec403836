"""Build hook: the wheel carries the embedded digit world (data/, about 6 MB) as package data under recast/_data, so
an installed package runs `recast demo`, `recast train --preset ci` and the sd3-tiny path from any folder.

Metadata lives in pyproject.toml; this file only adds the copy. A clone or an editable install reads data/ itself.
"""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SHIPPED = ("digit_base", "judges", "rewards", "prompts", "profiles")  # what the library reads at run time (data/README.md)


class BuildWithData(build_py):
    def run(self):
        super().run()
        src, dst = Path(__file__).parent / "data", Path(self.build_lib) / "recast" / "_data"
        for name in SHIPPED:
            shutil.copytree(src / name, dst / name, dirs_exist_ok=True)


setup(cmdclass={"build_py": BuildWithData})
