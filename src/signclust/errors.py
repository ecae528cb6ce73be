"""One clear message and a non-zero exit for bad input, never a traceback wall."""
from __future__ import annotations

import functools
import json
import os
import re
import sys
from pathlib import Path


class UserError(Exception):
    """Bad input or configuration: shown to the user as one line, exit status 2."""


def read_json(path: str | Path, kind: str = "a JSON object"):
    """The JSON document of a file a stage reads back (metrics, timings, a study summary), as a dict;
    a file that is not one (a merge conflict's markers, a truncated copy, an editor's leftovers) is one
    UserError naming it and ``kind`` (what it should be), not a JSONDecodeError traceback."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        where = f" (line {err.lineno} column {err.colno}: {err.msg})" if isinstance(err, json.JSONDecodeError) else ""
        raise UserError(f"{path} cannot be read as {kind}{where}; restore it (git or dvc checkout) "
                        "or run the stage that writes it again") from err
    if not isinstance(doc, dict):
        raise UserError(f"{path} does not hold {kind} (a JSON {type(doc).__name__}, not an object)")
    return doc


# the temporary files of signclust.io.atomic_path / atomic_dir: .<name>.<pid>.<random>.tmp[<suffix>]
_TEMP_NAME = re.compile(r"^\.(?P<name>.+)\.\d+\.[^.]+\.tmp(\.\w+)?$")


def os_error_message(err: OSError) -> str:
    """What failed and where. A write that failed on one of our temporary files (a read-only or full
    folder) names the folder and the file being written, not the temporary name."""
    if not err.filename:
        return str(err.strerror or err)
    path = str(err.filename)
    temp = _TEMP_NAME.match(os.path.basename(path))
    if temp:
        return f"cannot write {os.path.join(os.path.dirname(path), temp['name'])}: {err.strerror or err}"
    return f"{err.strerror or err}: {path}"


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
            print(f"error: {os_error_message(err)}", file=sys.stderr)
            sys.exit(2)
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr)
            sys.exit(130)
    return wrapper
