"""spark-submit entry point for `intent submit`: the same arguments as the command line."""

from __future__ import annotations

import sys

from intent_spark.cli import main

if __name__ == "__main__":
    raise SystemExit(main(["submit", *sys.argv[1:]]))
