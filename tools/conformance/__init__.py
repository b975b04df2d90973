"""moxlite's conformance table with MoXing's public documentation: data for the docs generator.

Nothing in ``moxlite/`` imports these modules; ``tools/conformance_table.py`` prints them as
``docs/reference/conformance.md`` and the ``tests/test_conformance_*.py`` check each row against
the code. Import them with ``tools/`` on ``sys.path`` (``from conformance import file_api``).

- ``file_api.py``: the file API's rows (``mox.file``), ``resolve``, ``counts`` and the
  documented examples ported as tests (``EXAMPLES``);
- ``tensorflow_api.py``: the TensorFlow-API and data rows;
- ``links.py``: the test that shows each "same" row.
"""
