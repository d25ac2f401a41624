"""spark-submit entry point for `intent export`: the same arguments as the command line."""

from __future__ import annotations

import sys

from intent_spark.cli import main

if __name__ == "__main__":
    raise SystemExit(main(["export", *sys.argv[1:]]))
