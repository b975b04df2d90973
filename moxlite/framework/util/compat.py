"""MoXing's ``moxing.framework.util.compat``: text/bytes conversion for Python 2 and 3 scripts."""


def as_bytes(value, encoding="utf-8"):
    """``value`` as bytes (str is encoded; bytes and bytearray pass)."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value)
    if isinstance(value, str):
        return value.encode(encoding)
    raise TypeError(f"as_bytes: expected str or bytes, got {type(value).__name__}")


def as_str(value, encoding="utf-8"):
    """``value`` as str (bytes are decoded; str passes)."""
    if isinstance(value, str):
        return value
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode(encoding)
    raise TypeError(f"as_str: expected str or bytes, got {type(value).__name__}")


as_text = as_str
