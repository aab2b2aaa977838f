"""On/off switches read from the environment (TILEX_FASTPATH, TILEX_NO_CFAST, TILEX_DIRECT_LAUNCH, ...)."""
from __future__ import annotations

import os

OFF = ("0", "false", "no", "off")


def switch(name: str, default: bool) -> bool:
    """The switch `name`: off for 0 / false / no / off (any case, surrounding spaces ignored), on for any other
    value, `default` when it is unset or empty."""
    v = os.environ.get(name, "").strip().lower()
    return default if v == "" else v not in OFF
