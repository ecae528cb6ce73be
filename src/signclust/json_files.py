"""Reading back the JSON files the stages write (metrics, timings, study summaries), with one clear error.

Kept out of ``signclust.errors``: that module is in the import closure of every method, so a change to it
changes every fit's code stamp (``checkpoint.code_version``) and the precision references made from it.
"""
from __future__ import annotations

import json
from pathlib import Path

from signclust.errors import UserError


def read_json(path: str | Path, kind: str = "a JSON object") -> dict:
    """The JSON document of a file a stage reads back, as a dict; a file that is not one (a merge
    conflict's markers, a truncated copy, an editor's leftovers) is one UserError naming it and
    ``kind`` (what it should be), not a JSONDecodeError traceback."""
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
