"""Folder of the ``sgl_kernel`` CPU stand-in: put on the import path by ``standins.use_sgl_kernel_stand_in()``
(never imported as ``sglang_specv2_fixes.testing.stubs.*``)."""
