"""Stage 1, tables: what a table is and where tables come from.

`table` (Table, the 17-bin access histogram, statistics from a trace), `shards` (a table cut
into column or row ranges, each shard a Table), `features` (the 21-number feature vector),
`synthetic` (the seeded generator), `traces` (lookup traces for measurement), `sources` (table
specs and generated-table files), `dlrm_data` (the public data set).
May import: the root modules (errors, files, report) only.
"""

from dreamshard.tables.table import Table

__all__ = ["Table"]
