"""`python -m runner.config`: docs/configuration.md's table of every variable, from the declarations."""

import sys

from runner.config.settings import markdown_table
from runner.config.values import SETTINGS, Config, HttpConfig

sys.stdout.write(markdown_table(SETTINGS, Config(), HttpConfig()))
