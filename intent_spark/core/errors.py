"""User-facing errors: each prints as one line and exits non-zero, never a traceback."""


class IntentError(Exception):
    """A user mistake (bad path, bad conf, bad input) with a one-line explanation."""


class ConfError(ValueError):
    """A conf file is missing, unreadable or names an unknown key."""


class PluginError(IntentError):
    """A model plug-in's own code raised: one line naming the model, the call and the plug-in's
    own file and line. ``frames`` are the plug-in's frames of the traceback (what the terminal
    shows under the line), ``traceback`` the whole of it (``--verbose``, and the file it is
    saved in, ``saved``)."""

    def __init__(self, message: str, model: str, frames: str, traceback: str) -> None:
        super().__init__(message)
        self.message, self.model, self.frames, self.traceback = message, model, frames, traceback
        self.saved: str | None = None

    def __str__(self) -> str:
        return self.message + (f"; its traceback is in {self.saved}" if self.saved else "")
