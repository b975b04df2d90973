"""MoXing's ``moxing.framework`` import path: ``from moxlite.framework import file`` is ``mox.file``.

``import moxlite.framework.file`` works too (the same module object), and
``moxlite.framework.util.compat`` gives MoXing's ``as_str``/``as_bytes``.
"""

import sys

from moxlite import file

sys.modules[__name__ + ".file"] = file

__all__ = ["file"]
