"""The table list: which Iceberg tables get a compaction DAG and how each is kept.

- :mod:`.schema`: every setting of an entry, its type, its check and its one default (pydantic);
- :mod:`.loader`: the file, found, read and validated entry by entry.
"""
