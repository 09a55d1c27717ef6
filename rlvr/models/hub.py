"""Telling a hub model id from a local path, the same way in pre-flight, eval and LoRA merge."""

import re

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
