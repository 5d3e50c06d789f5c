"""The one error type the reader raises, so the CLI can print it without a traceback."""


class InputError(ValueError):
    """A malformed scenario or jobs file, located by file and line."""

    def __init__(self, path: str, line: int | None, message: str) -> None:
        self.path = path
        self.line = line
        self.message = message
        where = f"{path}:{line}" if line is not None else path
        super().__init__(f"{where}: {message}")
