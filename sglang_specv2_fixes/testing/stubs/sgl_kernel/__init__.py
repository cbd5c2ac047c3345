"""Test-only stand-in for the GPU-only ``sgl_kernel`` package, so SGLang's Python modules import on CPU.

Every attribute is a no-op callable and every submodule resolves to another stand-in module. No SGLang
logic the tests exercise runs through it: the tests only touch CPU-side scheduler/request code.
"""

import importlib.abc
import importlib.machinery
import sys
import types

__version__ = "0.0.0+cpu-stand-in"
STAND_IN = True


class _Anything:
    """Callable placeholder whose attributes are placeholders too (e.g. ``scalar_types.uint4b8``)."""

    def __init__(self, name):
        self._name = name

    def __call__(self, *args, **kwargs):
        return None

    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Anything(f"{self._name}.{name}")

    def __repr__(self):
        return f"<sgl_kernel stand-in {self._name}>"


class _StandInModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _Anything(f"{self.__name__}.{name}")


class _Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path, target=None):
        if fullname.startswith("sgl_kernel."):
            return importlib.machinery.ModuleSpec(fullname, self, is_package=True)
        return None

    def create_module(self, spec):
        mod = _StandInModule(spec.name)
        mod.__path__ = []
        return mod

    def exec_module(self, module):
        pass


if not any(isinstance(f, _Finder) for f in sys.meta_path):
    sys.meta_path.append(_Finder())

sys.modules[__name__].__class__ = _StandInModule
