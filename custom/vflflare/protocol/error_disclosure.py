"""What of a party's error may cross to another party.

An error travels from a site (or a label-owning site) to the coordinator, which writes it to the
server's logs and the job's results file. Only what the coordinator already holds may travel: the
site, the file, line numbers, column names and counts, never a row's ID or value. The full message
stays in the party's own log.

- A `PartyError` (DataError, AlignmentError) carries that form itself (`error.public`).
- vflflare's other errors are written here and name settings, shapes, files and sites, never rows:
  their text travels.
- An error raised inside a library (numpy, torch, csv, ...) may quote whatever it was given, row
  values included: only its type and the vflflare function it escaped from travel.
"""

from __future__ import annotations

import traceback
from pathlib import Path

from vflflare.data.errors import PartyError

_PACKAGE = Path(__file__).resolve().parents[1]


def public_message(error: BaseException, party: str) -> str:
    """`Type: text` of `error` as it may leave `party` (e.g. "site 'site-1'"), pointing to its own log
    where something was left out."""
    where = f"the full message is in {party}'s own log"
    if isinstance(error, PartyError):
        text = error.public if error.public == str(error) else f"{error.public} ({where})"
        return f"{type(error).__name__}: {text}"
    frames = traceback.extract_tb(error.__traceback__)
    ours = [frame for frame in frames if _in_package(frame.filename)]
    if frames and ours and ours[-1] is frames[-1]:
        return f"{type(error).__name__}: {error}"
    origin = f" in {ours[-1].name} ({Path(ours[-1].filename).name} line {ours[-1].lineno})" if ours else ""
    return f"{type(error).__name__}{origin}; {where}"


def _in_package(filename: str) -> bool:
    try:
        Path(filename).resolve().relative_to(_PACKAGE)
    except ValueError:
        return False
    return True
