"""The old name of :mod:`voicechat.random_checkpoint`, kept only while engine.py's ``demo_model`` imports it from
here. Delete this file when that import names ``voicechat.random_checkpoint``."""

from .random_checkpoint import write_tiny_checkpoint  # noqa: F401
