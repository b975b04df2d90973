"""MoXing's ``moxing.framework.util``: ``compat``."""
