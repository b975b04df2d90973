"""MoXing's ``moxing.framework`` import path: ``from moxlite.framework import file``.

MoXing's file API documentation names its functions ``moxing.framework.file.<name>``, and
scripts write ``from moxing.framework import file``. Here ``file`` is ``moxlite.file``
(the same module as ``mox.file``), so such a script needs only its import line changed.
"""

from moxlite import file

__all__ = ["file"]
