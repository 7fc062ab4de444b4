"""The event store adapters: the PostgreSQL and SQLite stores (`sql`, `postgres`, `sqlite`),
the group-commit writer (`writer`), live tails (`tail`, `hub`, `listener`, `bells`), leases,
blobs, partitions, the API keys table (`keys`), the audit scans and migrations. `factory`
opens a store from a URL. Nothing is re-exported here: a module imports the one it needs.
"""
