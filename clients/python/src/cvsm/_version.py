"""cvsm._version holds the package version and the user agent every request carries."""

__version__ = "0.1.0"

USER_AGENT = f"cvsm-python/{__version__}"
