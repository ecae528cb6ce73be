"""One clear message and a non-zero exit for bad input, never a traceback wall."""
from __future__ import annotations

import functools
import sys


class UserError(Exception):
    """Bad input or configuration: shown to the user as one line, exit status 2."""


def cli_main(fn):
    """Wrap a stage's main(): UserError, and an OSError from the file system (a read-only or full
    disk, a folder where a file was expected), -> one line on stderr and exit 2."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except UserError as err:
            print(f"error: {err}", file=sys.stderr)
            sys.exit(2)
        except OSError as err:
            where = f": {err.filename}" if err.filename else ""
            print(f"error: {err.strerror or err}{where}", file=sys.stderr)
            sys.exit(2)
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            sys.exit(130)
    return wrapper
