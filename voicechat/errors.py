"""The exceptions voicechat raises for problems a user can fix (bad input, bad checkpoint, no network).

Each message is one line that says what is wrong and what to do; a traceback means a bug.
"""

import sys
from pathlib import Path


def command_name() -> str:
    """How the user started the command line, for the commands that messages suggest: ``voicechat`` (the installed
    command) or ``python -m voicechat``."""
    return "voicechat" if Path(sys.argv[0]).name == "voicechat" else "python -m voicechat"


class VoiceChatError(Exception):
    """Base class of every user-facing voicechat error."""


class ConfigError(VoiceChatError):
    """A config.json that voicechat cannot read, or one that disagrees with the weights."""


class CheckpointError(VoiceChatError):
    """Weights that are missing, unexpected, misshapen, all-zero or non-finite."""


class ModelUnavailable(VoiceChatError):
    """A checkpoint that is neither a local directory nor reachable on the Hugging Face Hub."""


class AudioInputError(VoiceChatError):
    """An input recording that cannot be used (unreadable, empty, too long, NaN ...)."""


class AudioDeviceError(VoiceChatError):
    """No usable microphone or speaker: PortAudio missing, no device, a device that stopped during a call."""


class FellBehind(VoiceChatError):
    """A live conversation stopped because the model could not keep up with real time on this machine."""


class Cancelled(VoiceChatError):
    """A generation stopped on request (the progress callback raised it)."""


class SessionsFull(VoiceChatError):
    """A conversation asked of a group (or a server) whose conversations are all taken."""


class TimelineFull(VoiceChatError):
    """A conversation that would pass the session's timeline limit."""


class OutputError(VoiceChatError):
    """An output path that cannot be written (a folder, a FIFO, a read-only place, the input), found before the run."""


class ToolError(VoiceChatError):
    """A tool declaration or tool result voicechat cannot use (bad schema, too many tools, unknown call id ...)."""


class TestSetError(VoiceChatError):
    """A test set ``voicechat batch`` cannot run: no items, a bad manifest line, an id twice, an output folder that
    holds another run."""

    __test__ = False  # not a pytest test class, despite its name
