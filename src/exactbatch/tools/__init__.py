"""The logic behind the ``exactbatch`` command, one module per subcommand.

``exactbatch.cli`` parses arguments and calls these; they are plain
functions that take paths and options and return what they found (a dict
the command prints as a table or as JSON). Nothing here is imported by
``import exactbatch``; pyarrow, matplotlib and tqdm are imported only by the
code paths that need them.

    info      what a file holds (.ndf header and size check; Parquet metadata)
    convert   Parquet / CSV / .npy -> .ndf, and .ndf -> Parquet, streamed
    shuffle   the one-time shuffle on disk, in bounded memory
    mixing    how well a streaming loader setting mixes this data (table, plot)
    bench     rows/s and peak memory of the loader against a bare read
"""
