"""Runs one SQL query with DuckDB (the PyPI `duckdb` package) and prints its rows as JSON.

    python3 query.py WORKDIR < query.sql

The query runs with WORKDIR as the current directory, so docs/FLEET.md's relative paths
(`fleet/*/*/*.parquet`) read WORKDIR/fleet. Dates and decimals are printed as text.
"""

import json
import os
import sys

import duckdb


def main():
    os.chdir(sys.argv[1])
    sql = sys.stdin.read()
    rel = duckdb.sql(sql)
    cols = rel.columns
    rows = [dict(zip(cols, r)) for r in rel.fetchall()]
    json.dump(rows, sys.stdout, default=str)


if __name__ == "__main__":
    main()
