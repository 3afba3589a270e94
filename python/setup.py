"""pip install --no-build-isolation ./python  (docs/python.md "Installing").

No network and nothing but Debian's setuptools: the extension is built by mixp's own CMake
(cmake/MixpPython.cmake, target mixp_python), not by setuptools. With MIXP_BUILD_DIR set to a
configured build tree (e.g. build/release) that tree is built and reused; otherwise a Release tree
is configured in build/python-pip next to the sources. The package gets the extension and
libmixp.so.0 side by side (the extension's RPATH holds $ORIGIN), so it needs no install prefix.
"""
import glob
import os
import shutil
import subprocess
import sys

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
SOURCE = os.path.dirname(HERE)


def cmake_build_dir():
    build = os.environ.get("MIXP_BUILD_DIR")
    if build:  # relative paths from the repository root (pip runs this file in python/)
        return os.path.join(SOURCE, build)
    build = os.path.join(SOURCE, "build", "python-pip")
    if not os.path.exists(os.path.join(build, "CMakeCache.txt")):
        subprocess.check_call(["cmake", "-S", SOURCE, "-B", build, "-G", "Ninja",
                               "-DCMAKE_BUILD_TYPE=Release", "-DMIXP_PYTHON=ON",
                               f"-DPython3_EXECUTABLE={sys.executable}", "-DMIXP_BUILD_TESTS=OFF",
                               "-DMIXP_BUILD_BENCH=OFF", "-DMIXP_BUILD_EXAMPLES=OFF"])
    return build


class BuildWithCMake(build_py):
    def run(self):
        super().run()
        build = cmake_build_dir()
        jobs = os.environ.get("MIXP_JOBS", "2")
        subprocess.check_call(["cmake", "--build", build, "-j", jobs, "--target", "mixp_python"])
        pkg = os.path.join(build, "python", "mixp")
        ext = glob.glob(os.path.join(pkg, "_mixp*.so"))
        if not ext:
            raise RuntimeError(f"the build in {build} made no mixp extension (is MIXP_PYTHON off?)")
        dest = os.path.join(self.build_lib, "mixp")
        os.makedirs(dest, exist_ok=True)
        shutil.copy2(ext[0], dest)
        shutil.copy2(os.path.join(build, "libmixp.so.0"), dest)  # the SONAME (a symlink's target)


class BinaryDistribution(Distribution):
    def has_ext_modules(self):
        return True  # a platform wheel: the package holds a compiled module


setup(
    name="mixp",
    version="0.1.0",
    description="mixp's number formats, FP8 fake quantization and training engine from Python",
    packages=["mixp"],
    package_dir={"mixp": "mixp"},
    python_requires=">=3.9",
    install_requires=["numpy"],
    cmdclass={"build_py": BuildWithCMake},
    distclass=BinaryDistribution,
)
