"""User-facing errors: each prints as one line and exits non-zero, never a traceback."""


class IntentError(Exception):
    """A user mistake (bad path, bad conf, bad input) with a one-line explanation."""


class ConfError(ValueError):
    """A conf file is missing, unreadable or names an unknown key."""
