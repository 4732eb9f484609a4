#!/usr/bin/env python3
"""What one write transaction costs SQLite itself on this machine's disk: the floor under each of
a batch's commit groups and claims in `herald serve` (the same system libsqlite3, the store's
journal mode and synchronous setting). Each transaction is `BEGIN IMMEDIATE`, one small update
on each of PAGES tables (so PAGES pages change and go to the write-ahead log), `COMMIT`; the CPU
(user + system) of the process over the transactions is printed per transaction, with nothing of
Herald's, GRDB's or a thread hand-over in it.

    scripts/bench-sqlite-floor.py                    # 1, 3 and 5 pages, 5,000 transactions each
    scripts/bench-sqlite-floor.py --pages 5 --transactions 20000 --directory /var/lib/herald
"""
import argparse
import os
import sqlite3
import tempfile
import time


def measure(directory, pages, transactions):
    path = os.path.join(directory, "floor-%d.sqlite" % pages)
    database = sqlite3.connect(path, isolation_level=None)
    try:
        database.execute("PRAGMA journal_mode = WAL")
        database.execute("PRAGMA synchronous = NORMAL")
        tables = ["t%d" % table for table in range(pages)]
        for table in tables:
            database.execute("CREATE TABLE %s (id INTEGER PRIMARY KEY, value BLOB)" % table)
            database.executemany("INSERT INTO %s VALUES (?, ?)" % table, ((row, b"x" * 200) for row in range(100)))
        statements = ["UPDATE %s SET value = ? WHERE id = ?" % table for table in tables]
        value = b"y" * 200
        start = time.process_time()
        for number in range(transactions):
            database.execute("BEGIN IMMEDIATE")
            for statement in statements:
                database.execute(statement, (value, number % 100))
            database.execute("COMMIT")
        return (time.process_time() - start) / transactions
    finally:
        database.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, action="append", help="pages changed a transaction (repeatable; default 1, 3, 5)")
    parser.add_argument("--transactions", type=int, default=5000, help="transactions a measurement (default 5,000)")
    parser.add_argument("--directory", help="where to write the databases (default: a new temporary directory under /tmp)")
    arguments = parser.parse_args()
    if not 1 <= arguments.transactions <= 1_000_000:
        parser.error("--transactions must be between 1 and 1000000")
    pages = arguments.pages or [1, 3, 5]
    if any(not 1 <= count <= 64 for count in pages):
        parser.error("--pages must be between 1 and 64")
    with tempfile.TemporaryDirectory(dir=arguments.directory or "/tmp") as directory:
        print("SQLite %s, WAL, synchronous NORMAL, in %s" % (sqlite3.sqlite_version, arguments.directory or "/tmp"))
        for count in pages:
            seconds = measure(directory, count, arguments.transactions)
            print("   %d page(s) a transaction: %.1f us of CPU a transaction (%d transactions)" % (
                count, seconds * 1e6, arguments.transactions))


if __name__ == "__main__":
    main()
