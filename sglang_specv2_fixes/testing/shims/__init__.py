"""Folder of the ``datasets`` import shim: put on the import path by ``standins.use_datasets_shim()`` (never
imported as ``sglang_specv2_fixes.testing.shims.*``)."""
