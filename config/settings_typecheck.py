"""Settings for mypy's Django plugin, which imports the settings module to learn the installed apps and models.

The real settings refuse to load without a secret key when DEBUG is off; the type checker runs nothing, so a
placeholder is enough, and no developer's .env is read (the checker sees the same settings everywhere).
"""

import os

os.environ.setdefault("SECRET_KEY", "typecheck-only-placeholder")
os.environ.setdefault("GPUMARKET_ENV_FILE", "")

from config.settings import *  # noqa: E402, F403
