"""The one error type for user mistakes."""


class ConfigError(ValueError):
    """A configuration the user can fix: the message names the field, the value, the rule and the fix."""
