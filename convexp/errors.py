"""The error type for problems a user can fix (bad override, missing file, unknown name).

The CLI prints such an error as one line and exits with code 2; anything else is a bug and keeps
its traceback.
"""


class UserError(ValueError):
    """A problem in the user's input; its message names the problem and the fix in one line."""


class ConfigError(UserError):
    """A configuration problem (an override, a config file, a value out of range)."""
