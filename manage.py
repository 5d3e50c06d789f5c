#!/usr/bin/env python
import os
import sys

# Commands that need neither the database nor the platform's secrets run without loading Django's settings, so
# they work on a laptop with nothing configured (README: `manage.py simulate SCENARIO.toml`); settings would
# rightly refuse to start without SECRET_KEY when DEBUG is off.
OFFLINE = {"simulate": "allocator.sim.cli"}


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] in OFFLINE:
        from importlib import import_module

        sys.exit(import_module(OFFLINE[sys.argv[1]]).main(sys.argv[2:]))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
