"""What every benchmark does last: print its result as JSON and write it to ``results/<name>.json``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def write_report(result: dict[str, Any], out: str | Path, echo: bool = True) -> None:
    """Print ``result`` (indented JSON) unless ``echo`` is False, and write it to ``out``."""
    text = json.dumps(result, indent=2)
    if echo:
        print(text)
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(text + "\n")
