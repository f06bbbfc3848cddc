"""`make mutants`: mutation testing of the order, the .ndf checks, audit, the loader's
cursor and state, batching, feeds and the compiled core.

mutmut (configured in pyproject.toml's [tool.mutmut]) puts one-line bugs
into the code, one at a time, and runs the tests that call the mutated
function; a mutant the tests pass with has survived. Each target below is a
separate mutmut run in build/mutants/TARGET, with only its own files mutated
and its own test files run, so that the whole run stays feasible on two
cores. Prints, per target, killed / survived / total and the kill rate, and
lists the survivors (``--diff`` shows each one's change).

mutmut mutates Python only: the ``core`` target (the C sources of
``exactbatch._core``) has a runner of its own, below (:func:`run_core`), with
the same report.

    python tests/mutants.py                 # every target, in the order below
    python tests/mutants.py order ndf       # some targets
    python tests/mutants.py --summary       # the last results again, no run
    python tests/mutants.py --recheck ndf   # only what was not killed, against today's tests
    python tests/mutants.py --recheck ndf --only 'exactbatch.ndf.x_f*'  # these, any verdict

Not part of ``make test``: a full run takes about an hour and a half on two cores.
"""

from __future__ import annotations

import argparse
import ast
import fnmatch
import hashlib
import io
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import tokenize
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from queue import Queue

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the targets can be read (tests/test_mutant_targets.py),
    tomllib = None  # type: ignore[assignment]  # not run

ROOT = Path(__file__).resolve().parent.parent
WORK = ROOT / "build" / "mutants"

# Memory measurements are slow (and the rows they hand out are checked elsewhere); a test
# that runs a new process cannot see a mutant. Named one by one: `-k "not memory"` also
# left out every test whose name or parameter merely says memory (the backends' gather
# from memory, memory_parts, the memory:// filesystem's reads, in-memory shuffles).
MEMORY_MEASUREMENTS = (
    "test_memory_is_two_batches_and_their_chunks",
    "test_memory_bytes_are_buffer_two_batches_and_two_chunks",
    "test_peak_memory_stays_under_the_budget",
    "test_conversion_memory_is_bounded",
    "test_batch_size_beyond_memory_allocates_only_what_the_data_needs",
    "leave_no_thread_descriptor_or_memory_behind",
)
FAST_ONLY = ["-k", f"not ({' or '.join(MEMORY_MEASUREMENTS)}) and not new_process"]
# test_order_check.py's NumPyro fit: a minute of compiling, for a call its other tests make.
NO_NUMPYRO_FIT = [
    "-k",
    f"{FAST_ONLY[1]} and not test_fit_examines_the_stream_before_its_first_step",
]
# tests/adapters' end-to-end NumPyro and PyMC fits (marked `fit`: each compiles and runs
# real steps, seconds to a minute) stay in `make test` and out of the `samplers` target:
# a mutant of a function a fit calls ran every such fit (hours for the target on two
# cores). Its functions are reached there by fast tests with stand-ins instead.
NO_FITS = [*FAST_ONLY, "-m", "not fit"]
# The loader's tests that run batches through every stage, for the stages' targets.
PIPELINE_TESTS = [
    "tests/loader/test_exactness.py",
    "tests/loader/test_loader.py",
    "tests/loader/test_resume.py",
    "tests/loader/test_distributed.py",
    *FAST_ONLY,
]

# target: (files mutated, mutant-name globs run (functions), test files run)
TARGETS = {
    "order": (
        ["src/exactbatch/order/*"],
        ["exactbatch.order.*"],
        [
            "tests/order/test_bijection.py",
            "tests/order/test_shards.py",
            "tests/order/test_splits.py",
            "tests/order/test_windows.py",
            "tests/order/test_ranges_rule.py",  # (order/ranges.py: elastic="ranges"'s rule)
            "tests/loader/test_elastic_ranges.py",
            "tests/loader/test_distributed.py",
        ],
    ),
    "ndf": (
        [
            "src/exactbatch/ndf/format.py",
            "src/exactbatch/ndf/file.py",
            "src/exactbatch/ndf/local.py",
        ],
        [  # the open, size and header checks
            "exactbatch.ndf.format.x_expected_size*",
            "exactbatch.ndf.format.x_check_header*",
            "exactbatch.ndf.local.xǁLocalHandleǁcheck_size*",
            "exactbatch.ndf.local.xǁLocalHandleǁpread_into*",
            "exactbatch.ndf.file.x_open_ndf*",
        ],
        [  # (the tests that read in a child process cannot see a mutant: left out)
            "tests/ndf/test_file.py",
            *(
                f"tests/reliability/test_files.py::{t}"
                for t in (
                    "test_fuzzed_ndf_file_is_a_clear_error_or_reads_exactly",
                    "test_giant_header_is_an_ndf_error_without_allocating",
                    "test_zero_width_file_with_a_giant_row_count_reads_as_empty_rows",
                    "test_missing_ndf_file_is_file_not_found",
                )
            ),
            # open_ndf's URL branch: fsspec's memory://, and S3 with its storage_options
            "tests/ndf/test_remote.py::test_memory_protocol_directly",
            "tests/ndf/test_remote.py::test_open_ndf_url_header_and_rows",
        ],
    ),
    "audit": (
        ["src/exactbatch/audit.py"],
        ["exactbatch.audit.*"],
        [
            "tests/test_audit.py",
            "tests/feeds/test_streamed_audit.py",
            "tests/loader/test_loader.py",
            "tests/loader/test_exactness.py",
        ],
    ),
    "loader": (  # the cursor (claims, hand-outs, give-backs, the ledger check) and the state
        [
            "src/exactbatch/loader/cursor.py",
            "src/exactbatch/loader/groups.py",  # (the claims' groups, split out of cursor.py)
            "src/exactbatch/loader/lifecycle.py",  # (its phases and start; and its standing,
            "src/exactbatch/loader/standing.py",  # both split out of cursor.py)
            "src/exactbatch/loader/epoch_iterator.py",
            "src/exactbatch/loader/iter_step.py",  # (iter()'s hand-out in one call: its twin)
            "src/exactbatch/loader/state.py",
            "src/exactbatch/loader/telemetry.py",  # (stats(): counts, latency, steps)
        ],
        [
            "exactbatch.loader.cursor.*",
            "exactbatch.loader.groups.*",
            "exactbatch.loader.lifecycle.*",
            "exactbatch.loader.standing.*",
            "exactbatch.loader.epoch_iterator.*",
            "exactbatch.loader.iter_step.*",
            "exactbatch.loader.state.*",
            "exactbatch.loader.telemetry.*",
        ],
        [
            "tests/loader/test_telemetry.py",
            "tests/loader/test_exactness.py",
            "tests/loader/test_loader.py",
            "tests/loader/test_resume.py",
            "tests/loader/test_threads.py",
            "tests/loader/test_distributed.py",
            "tests/loader/test_prefetch.py",
            "tests/loader/test_groups.py",
            "tests/loader/test_iter_step.py",
            "tests/loader/test_lifetimes.py",
            "tests/loader/test_lifecycle.py",
        ],
    ),
    "certify": (  # the records a state carries of each epoch begun, its lineage, the certificate
        [
            "src/exactbatch/loader/history.py",
            "src/exactbatch/loader/lineage.py",
            "src/exactbatch/loader/compaction.py",  # (old records folded: the state's bound)
            "src/exactbatch/certificate.py",
        ],
        [
            "exactbatch.loader.history.*",
            "exactbatch.loader.compaction.*",
            "exactbatch.loader.lineage.*",
            "exactbatch.certificate.*",
        ],
        [
            "tests/loader/test_certify.py",
            "tests/loader/test_certify_verdicts.py",
            "tests/loader/test_certify_lineage.py",
            "tests/loader/test_compaction.py",
            "tests/loader/test_exactness.py",
            "tests/loader/test_resume.py",
        ],
    ),
    "elastic": (  # elastic streams: the windowed order, the chunk cache, the feed
        [
            "src/exactbatch/order/windows.py",
            "src/exactbatch/sources/chunk_cache.py",
            "src/exactbatch/feeds/elastic_stream.py",
        ],
        [
            "exactbatch.order.windows.*",
            "exactbatch.sources.chunk_cache.*",
            "exactbatch.feeds.elastic_stream.*",
        ],
        [
            "tests/order/test_windows.py",
            "tests/sources/test_chunk_cache.py",
            "tests/feeds/test_elastic_stream.py",
            "tests/loader/test_distributed.py",
            # elastic="ranges" reads through the same feed, cache and chunk order
            # (WindowedOrder.unmixed_ranges is its rows' runs)
            "tests/order/test_ranges_rule.py",
            "tests/loader/test_elastic_ranges.py",
        ],
    ),
    "buffers": (  # the shuffle buffers: one piece or two halves, and the rule between them
        [
            "src/exactbatch/batching/buffer.py",
            "src/exactbatch/batching/buffer_whole.py",
            "src/exactbatch/batching/buffer_halves.py",
        ],
        ["exactbatch.batching.buffer*"],
        [
            "tests/batching/",
            "tests/feeds/test_streamed_properties.py",
            "tests/feeds/test_streamed.py",
            "tests/loader/test_exactness.py",
            "tests/loader/test_resume.py",
            *FAST_ONLY,
        ],
    ),
    "batching": (  # the epochs' batch plans (random access and streamed), re-batching, the gather
        [
            "src/exactbatch/batching/blocked_order.py",
            "src/exactbatch/batching/gather.py",
            "src/exactbatch/batching/random_access_epoch.py",
            "src/exactbatch/batching/rebatch.py",
            "src/exactbatch/batching/returned.py",
            "src/exactbatch/batching/stream_epoch.py",
        ],
        [
            "exactbatch.batching.blocked_order.*",
            "exactbatch.batching.gather.*",
            "exactbatch.batching.random_access_epoch.*",
            "exactbatch.batching.rebatch.*",
            "exactbatch.batching.returned.*",
            "exactbatch.batching.stream_epoch.*",
        ],
        [
            "tests/batching/",
            "tests/feeds/test_streamed_properties.py",
            "tests/feeds/test_streamed.py",
            *PIPELINE_TESTS,
        ],
    ),
    "feeds": (  # a source cut into epochs for one shard, how batches are dealt to the shards
        # (feeds/dealing.py: contiguous or elastic; feeds/ranges.py: elastic="ranges"; what
        # a state records of each, feeds/state_rules.py), and a stream's passes and hooks
        [  # (what moved out of feeds/streamed.py: the passes, the hooks, a stream's widths)
            "src/exactbatch/feeds/*",
            "src/exactbatch/sources/passes.py",
            "src/exactbatch/sources/protocols.py",
            "src/exactbatch/sources/chunks.py",
        ],
        [
            "exactbatch.feeds.*",
            "exactbatch.sources.passes.*",
            "exactbatch.sources.protocols.*",
            "exactbatch.sources.chunks.xǁWidthsǁ*",
        ],
        [
            "tests/feeds/",
            "tests/batching/",
            "tests/loader/test_elastic_ranges.py",  # (feeds/ranges.py, feeds/state_rules.py)
            "tests/sources/test_protocols.py",
            "tests/sources/test_blocks.py",  # chunk sources
            "tests/sources/test_parquet.py",
            # passes' reads ahead at a depth of 3 and more (chunks laid out as whole rows
            # by the reading threads), which a 2-core machine never chooses itself
            "tests/sources/test_read_ahead.py",
            *PIPELINE_TESTS,
        ],
    ),
    "padding": (  # even_batches="pad": padding jobs, batches made full with a mask
        ["src/exactbatch/batching/padding.py"],
        ["exactbatch.batching.padding.*"],
        ["tests/batching/test_padding.py", "tests/loader/test_pad.py", *FAST_ONLY],
    ),
    "transform": (  # Standardize (its statistics, widths, NaN fill) and column statistics
        ["src/exactbatch/transform.py", "src/exactbatch/stats.py"],
        ["exactbatch.transform.*", "exactbatch.stats.*"],
        [
            "tests/test_transform.py",
            "tests/loader/test_real_data.py",
            "tests/loader/test_nan_fill_columns.py",
            "tests/loader/test_by_name.py",  # statistics by name
            "tests/test_stats.py",
            "tests/test_kernels.py",
        ],
    ),
    "identity": (  # a state's fingerprint of its source
        ["src/exactbatch/sources/identity.py"],
        ["exactbatch.sources.identity.*"],
        [
            "tests/sources/test_identity.py",
            "tests/loader/test_fingerprint.py",
            "tests/loader/test_resume.py",
            "tests/loader/test_certify.py",
        ],
    ),
    "categories": (  # coded columns' vocabularies: in the manifest, and from Arrow/Parquet
        [
            "src/exactbatch/ndf/categories.py",
            "src/exactbatch/sources/categorical.py",
            "src/exactbatch/sources/categorical_args.py",
            "src/exactbatch/sources/code_dtype.py",
        ],
        [
            "exactbatch.ndf.categories.*",
            "exactbatch.sources.categorical.*",
            "exactbatch.sources.categorical_args.*",
            "exactbatch.sources.code_dtype.*",
        ],
        [
            "tests/sources/test_categorical.py",
            "tests/ndf/test_categories.py",
            "tests/tools/test_convert_columns.py",
            "tests/sources/test_hive.py",
            "tests/sources/test_wide_and_coded.py",  # the Arrow sources' categorical=
        ],
    ),
    "string_keys": (  # strings coded a chunk at once by their 64-bit keys
        ["src/exactbatch/sources/string_keys.py"],
        ["exactbatch.sources.string_keys.*"],
        ["tests/sources/test_string_keys.py", "tests/sources/test_plain_string_codes.py"],
    ),
    "selection": (  # DataLoader(features=, labels=): the columns a loader reads
        ["src/exactbatch/sources/selection.py"],
        ["exactbatch.sources.selection.*"],
        [  # (and what it describes: a state's fingerprint, names, categories)
            "tests/sources/test_selection.py",
            "tests/loader/test_fingerprint.py",
            "tests/loader/test_by_name.py",
            "tests/ndf/test_categories.py",
            *FAST_ONLY,
        ],
    ),
    "names": (  # column names: checked, kept, looked up
        ["src/exactbatch/ndf/names.py"],
        ["exactbatch.ndf.names.*"],
        ["tests/ndf/test_names.py", "tests/ndf/test_validation.py", "tests/ndf/test_categories.py"],
    ),
    "dataset_write": (  # a sharded dataset's writers (parts, aborts, the manifest at commit)
        ["src/exactbatch/ndf/dataset_write.py"],
        ["exactbatch.ndf.dataset_write.*"],
        [
            "tests/ndf/test_dataset_write.py",
            "tests/ndf/test_ndf_dataset.py",
            "tests/reliability/test_dataset_writes.py",
            "tests/ndf/test_validation.py",
            *FAST_ONLY,
        ],
    ),
    # -- issue 41: every module of src/ under a target (tests/test_mutant_targets.py
    # fails when one with real code is left out). Grouped by layer, lowest first.
    "foundations": (  # argument checks, the kernels' dispatch, array coercion
        [
            "src/exactbatch/checks.py",
            "src/exactbatch/kernels.py",
            "src/exactbatch/parts.py",
            "src/exactbatch/arrays.py",
            "src/exactbatch/dataset.py",
        ],
        [
            "exactbatch.checks.*",
            "exactbatch.kernels.*",
            "exactbatch.parts.*",
            "exactbatch.arrays.*",
            "exactbatch.dataset.*",
        ],
        [
            "tests/test_checks.py",
            "tests/test_kernels.py",
            "tests/test_parts.py",
            "tests/test_dataset.py",
            "tests/test_arrays.py",
            "tests/sources/test_kinds.py",  # (run_reads of a dataset's runs: the reader's own)
            "tests/sources/test_array_likes.py",
            "tests/sources/test_column_chunk.py",
            *FAST_ONLY,
        ],
    ),
    "read_ahead": (  # prefetch threads, ranks from the environment, URLs
        [
            "src/exactbatch/prefetch.py",
            "src/exactbatch/distributed.py",
            "src/exactbatch/urls.py",
        ],
        ["exactbatch.prefetch.*", "exactbatch.distributed.*", "exactbatch.urls.*"],
        [
            "tests/loader/test_prefetch.py",
            "tests/sources/test_read_ahead.py",
            "tests/test_urls.py",
            "tests/test_distributed_shard.py",
            "tests/loader/test_distributed.py",
            *FAST_ONLY,
        ],
    ),
    "ndf_write": (  # writing .ndf files, the JSON documents beside them, the manifest
        [
            "src/exactbatch/ndf/write.py",
            "src/exactbatch/ndf/jsondoc.py",
            "src/exactbatch/ndf/manifest.py",
            "src/exactbatch/ndf/temps.py",
            "src/exactbatch/ndf/regular.py",
        ],
        [
            "exactbatch.ndf.write.*",
            "exactbatch.ndf.jsondoc.*",
            "exactbatch.ndf.manifest.*",
            "exactbatch.ndf.temps.*",
            "exactbatch.ndf.regular.*",
        ],
        [
            "tests/ndf/test_write.py",  # (the five modules' own tests, each function on its own)
            "tests/ndf/test_jsondoc.py",
            "tests/ndf/test_manifest.py",
            "tests/ndf/test_temps.py",
            "tests/ndf/test_regular.py",
            "tests/ndf/test_file.py",
            "tests/ndf/test_validation.py",
            "tests/ndf/test_categories.py",
            "tests/ndf/test_names.py",
            "tests/reliability/test_documents.py",
            "tests/reliability/test_dataset_writes.py",
            *FAST_ONLY,
        ],
    ),
    "ndf_read": (  # a sharded dataset's parts, direct reads, the guard, remote reads
        [
            "src/exactbatch/ndf/dataset.py",
            "src/exactbatch/ndf/dataset_parts.py",
            "src/exactbatch/ndf/dataset_protocol.py",
            "src/exactbatch/ndf/direct.py",
            "src/exactbatch/ndf/guard.py",
            "src/exactbatch/ndf/remote.py",
            "src/exactbatch/ndf/storage.py",
        ],
        [
            "exactbatch.ndf.dataset.*",
            "exactbatch.ndf.dataset_parts.*",
            "exactbatch.ndf.dataset_protocol.*",
            "exactbatch.ndf.direct.*",
            "exactbatch.ndf.guard.*",
            "exactbatch.ndf.remote.*",
            "exactbatch.ndf.storage.*",
        ],
        [
            "tests/ndf/test_ndf_dataset.py",
            "tests/ndf/test_dataset_runs.py",  # (Parts.run_rows: a reader's runs, their hooks)
            "tests/ndf/test_dataset_remote.py",
            "tests/ndf/test_direct.py",
            "tests/ndf/test_guard.py",
            "tests/ndf/test_remote.py",
            "tests/ndf/test_pickle.py",
            "tests/ndf/test_storage.py",
            *FAST_ONLY,
        ],
    ),
    "sources": (  # random-access sources: kinds, columns by name, split/kfold, watched files
        [
            "src/exactbatch/sources/columns.py",
            "src/exactbatch/sources/splitting.py",
            "src/exactbatch/sources/file_watch.py",
            "src/exactbatch/sources/kinds.py",
            "src/exactbatch/sources/random_access.py",
            "src/exactbatch/sources/blocks.py",
        ],
        [
            "exactbatch.sources.columns.*",
            "exactbatch.sources.splitting.*",
            "exactbatch.sources.file_watch.*",
            "exactbatch.sources.kinds.*",
            "exactbatch.sources.random_access.*",
            "exactbatch.sources.blocks.*",
        ],
        [
            "tests/sources/test_columns.py",
            "tests/sources/test_kinds.py",
            "tests/ndf/test_dataset_runs.py",  # (NdfReader over a dataset: its runs, its close)
            "tests/sources/test_file_watch.py",
            "tests/order/test_splits.py",
            "tests/sources/test_random_access.py",
            "tests/sources/test_protocols.py",
            "tests/sources/test_blocks.py",
            "tests/sources/test_wide_and_coded.py",
            "tests/reliability/test_file_identity.py",
            "tests/loader/test_by_name.py",
            *FAST_ONLY,
        ],
    ),
    "arrow": (  # the Arrow family: tables, IPC, Parquet, DuckDB, polars, Hugging Face
        [
            "src/exactbatch/sources/arrow*.py",
            "src/exactbatch/sources/parquet*.py",
            "src/exactbatch/sources/duckdb_relations.py",
            "src/exactbatch/sources/polars_frames.py",
            "src/exactbatch/sources/hf_datasets.py",
        ],
        [
            "exactbatch.sources.arrow*",
            "exactbatch.sources.parquet*",
            "exactbatch.sources.duckdb_relations.*",
            "exactbatch.sources.polars_frames.*",
            "exactbatch.sources.hf_datasets.*",
        ],
        [
            "tests/sources/test_arrow_sources.py",
            "tests/sources/test_parquet.py",
            "tests/sources/test_parquet_labels.py",
            "tests/sources/test_parquet_urls.py",
            "tests/sources/test_hive.py",
            "tests/sources/test_wide_and_coded.py",
            *FAST_ONLY,
        ],
    ),
    "output": (  # what rows are made into (dtype, label dtype, transform, NaN rule); columns
        ["src/exactbatch/batching/output.py", "src/exactbatch/sources/column_chunk.py"],
        ["exactbatch.batching.output.*", "exactbatch.sources.column_chunk.*"],
        [
            "tests/batching/test_output.py",
            "tests/sources/test_column_chunk.py",
            "tests/loader/test_real_data.py",
            "tests/loader/test_nan_fill_columns.py",
            "tests/sources/test_arrow_sources.py",
            "tests/loader/test_rows.py",
            *FAST_ONLY,
        ],
    ),
    "dataloader": (  # the front door's own checks, next_into's buffers and its hand-out
        [
            "src/exactbatch/loader/dataloader.py",
            "src/exactbatch/loader/into.py",
            "src/exactbatch/loader/handout.py",
        ],
        [
            "exactbatch.loader.dataloader.*",
            "exactbatch.loader.into.*",
            "exactbatch.loader.handout.*",
        ],
        [
            "tests/loader/test_front_door.py",
            "tests/loader/test_handout.py",
            "tests/loader/test_loader.py",
            "tests/loader/test_rows.py",
            "tests/loader/test_subset.py",
            "tests/loader/test_by_name.py",
            "tests/loader/test_resume.py",
            *FAST_ONLY,
        ],
    ),
    "checkpoints": (  # the ranks' states beside a framework's checkpoints
        ["src/exactbatch/rank_states.py", "src/exactbatch/adapters/torch_checkpoint.py"],
        ["exactbatch.rank_states.*", "exactbatch.adapters.torch_checkpoint.*"],
        ["tests/test_rank_states.py", "tests/adapters/test_checkpoints.py"],
    ),
    "fits": (  # a fit's step schedule, its convergence check and the pre-fit mixing check
        [
            "src/exactbatch/adapters/convergence.py",
            "src/exactbatch/adapters/convergence_words.py",
            "src/exactbatch/adapters/schedule.py",
            "src/exactbatch/adapters/order_check.py",
        ],
        [
            "exactbatch.adapters.convergence.*",
            "exactbatch.adapters.convergence_words.*",
            "exactbatch.adapters.schedule.*",
            "exactbatch.adapters.order_check.*",
        ],
        [
            "tests/adapters/test_fit_schedule.py",
            "tests/adapters/test_order_check.py",
            *NO_NUMPYRO_FIT,
        ],
    ),
    "samplers": (  # NumPyro's and PyMC's fits: their terms, PyMC's schedule
        [
            "src/exactbatch/adapters/numpyro.py",
            "src/exactbatch/adapters/numpyro_adam.py",
            "src/exactbatch/adapters/numpyro_run.py",
            "src/exactbatch/adapters/numpyro_terms.py",
            "src/exactbatch/adapters/pymc.py",
            "src/exactbatch/adapters/pymc_terms.py",
            "src/exactbatch/adapters/pymc_schedule.py",
        ],
        [
            "exactbatch.adapters.numpyro*",
            "exactbatch.adapters.pymc*",
        ],
        [
            "tests/adapters/test_numpyro.py",
            "tests/adapters/test_pymc.py",
            "tests/adapters/test_fit_adam.py",
            # the run loops' bookkeeping, the pilot, the verdict's sums with stand-ins
            "tests/adapters/test_sampler_runs.py",
            *NO_FITS,
        ],
    ),
    "frameworks": (  # PyTorch and JAX: iterables, pinned buffers, device puts, minibatches
        [
            "src/exactbatch/adapters/torch.py",
            "src/exactbatch/adapters/torch_pinned.py",
            "src/exactbatch/adapters/jax.py",
            "src/exactbatch/adapters/jax_put.py",
            "src/exactbatch/adapters/minibatch.py",
        ],
        [
            "exactbatch.adapters.torch.*",
            "exactbatch.adapters.torch_pinned.*",
            "exactbatch.adapters.jax*",
            "exactbatch.adapters.minibatch.*",
        ],
        [
            "tests/adapters/test_torch.py",
            "tests/adapters/test_torch_pinned.py",
            "tests/adapters/test_jax.py",
            # (not tests/loader/test_pad.py: its one test of minibatch.py, the fit
            # helpers' refusal of even_batches="pad", imports NumPyro and PyMC in each
            # mutant's process; test_minibatch.py checks that refusal's text in full)
            "tests/adapters/test_minibatch.py",
            *FAST_ONLY,
        ],
    ),
    "cluster": (  # Dask and Ray: plans, sinks, Ray Train's reports and restores
        [
            "src/exactbatch/adapters/dask.py",
            "src/exactbatch/adapters/dask_plan.py",
            "src/exactbatch/adapters/ray.py",
            "src/exactbatch/adapters/ray_sink.py",
            "src/exactbatch/adapters/ray_train.py",
        ],
        ["exactbatch.adapters.dask*", "exactbatch.adapters.ray*"],
        [
            "tests/adapters/test_dask.py",
            "tests/adapters/test_dask_categorical.py",
            "tests/adapters/test_ray.py",
            "tests/adapters/test_ray_sink.py",  # (the sink's tasks in this process)
            "tests/adapters/test_checkpoints.py",
            *FAST_ONLY,
        ],
    ),
    "cli": (  # the command line: its parser and arguments, info, certify, the shared helpers
        [
            "src/exactbatch/cli.py",
            "src/exactbatch/cli_args.py",
            "src/exactbatch/cli_parser.py",
            "src/exactbatch/tools/common.py",
            "src/exactbatch/tools/column_args.py",
            "src/exactbatch/tools/info.py",
            "src/exactbatch/tools/certify.py",
            "src/exactbatch/tools/bench.py",
        ],
        [
            "exactbatch.cli.*",
            "exactbatch.cli_args.*",
            "exactbatch.cli_parser.*",
            "exactbatch.tools.common.*",
            "exactbatch.tools.column_args.*",
            "exactbatch.tools.info.*",
            "exactbatch.tools.certify.*",
            "exactbatch.tools.bench.*",
        ],
        [
            "tests/test_cli_args.py",
            "tests/tools/test_common.py",
            "tests/tools/test_column_args.py",
            "tests/tools/test_certify_files.py",
            "tests/tools/test_bench.py",
            "tests/tools/test_info.py",
            "tests/tools/test_cli.py",
            "tests/tools/test_cli_help.py",  # every --help word for word: the help texts
            "tests/tools/test_cli_parser.py",
            "tests/tools/test_cli_commands.py",
            "tests/tools/test_info_url.py",
            "tests/tools/test_names_and_stats.py",
            "tests/loader/test_certify.py",
            "tests/test_checks.py",
            *FAST_ONLY,
        ],
    ),
    "convert": (  # exactbatch convert (NumPy, CSV, Parquet inputs) and shuffle
        [
            "src/exactbatch/tools/convert*.py",
            "src/exactbatch/tools/shuffle.py",
            "src/exactbatch/tools/ndf_stream.py",
        ],
        [
            "exactbatch.tools.convert*",
            "exactbatch.tools.shuffle.*",
            "exactbatch.tools.ndf_stream.*",
        ],
        [
            "tests/tools/test_convert.py",
            "tests/tools/test_convert_columns.py",
            "tests/tools/test_convert_csv.py",
            "tests/tools/test_convert_inputs.py",
            "tests/tools/test_ndf_stream.py",
            "tests/tools/test_dataset_cli.py",
            "tests/tools/test_shuffle.py",
            *FAST_ONLY,
        ],
    ),
    "mixing": (  # exactbatch mixing: its inputs, its score and verdict, its report
        [
            "src/exactbatch/tools/mixing.py",
            "src/exactbatch/tools/mixing_inputs.py",
            "src/exactbatch/tools/mixing_report.py",
            "src/exactbatch/mixing_score.py",
        ],
        [
            "exactbatch.tools.mixing.*",
            "exactbatch.tools.mixing_inputs.*",
            "exactbatch.tools.mixing_report.*",
            "exactbatch.mixing_score.*",
        ],
        [
            "tests/tools/test_mixing.py",
            "tests/tools/test_mixing_inputs.py",
            "tests/tools/test_mixing_report.py",
            "tests/test_mixing_score.py",
            "tests/adapters/test_order_check.py",
            *NO_NUMPYRO_FIT,
        ],
    ),
    "mixing_plot": (  # its --plot, drawn in-process (a target of its own: minutes, not 90)
        ["src/exactbatch/tools/mixing_plot.py"],
        ["exactbatch.tools.mixing_plot.*"],
        ["tests/tools/test_mixing_plot.py", *FAST_ONLY],
    ),
}

KILLED = {"killed", "timeout", "segfault", "caught by type check"}
EARLIER = "earlier.json"  # a target's verdicts before its last recheck (see run)
NOT_COUNTED = {"no compile", "same binary"}  # the core's mutants that are no other program
ALL = [*TARGETS, "core"]  # `core`: the compiled core, by run_core (mutmut mutates Python only)


def prepare(target: str) -> Path:
    """A fresh work folder: src and tests linked, pyproject.toml with the target's config
    and pytest's settings."""
    if tomllib is None:
        sys.exit("make mutants needs Python >= 3.11 (tomllib)")
    work = WORK / target
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    for name in ("src", "tests"):
        (work / name).symlink_to(ROOT / name)
    write_config(target, work)
    return work


def write_config(target: str, work: Path) -> None:
    """``work``'s pyproject.toml: the target's files and today's test files (a recheck
    writes it again, so that a test file added to the target since is run too)."""
    files, _, tests = TARGETS[target]
    tool = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]
    # bench/ and docs/ too: tests/order/test_ranges_rule.py checks the order against its
    # model in bench/, tests/tools/test_cli.py runs docs/cli.md's session (mutmut copies
    # tests/ and what also_copy names into its mutants/ folder)
    for name in ("bench", "docs"):
        if not (work / name).exists():
            (work / name).symlink_to(ROOT / name)
    config = dict(
        tool["mutmut"],
        only_mutate=files,
        pytest_add_cli_args_test_selection=tests,
        also_copy=["bench/", "docs/"],
    )
    lines = ["[tool.mutmut]"] + [f"{k} = {json.dumps(v)}" for k, v in config.items()]
    # pytest's own settings too (pythonpath: the tests import helpers and laws from tests/)
    lines += ["[tool.pytest.ini_options]"]
    lines += [f"{k} = {json.dumps(v)}" for k, v in tool["pytest"]["ini_options"].items()]
    (work / "pyproject.toml").write_text("\n".join(lines) + "\n")


def run(target: str, recheck: bool = False, only: list[str] | None = None) -> None:
    """A fresh mutmut run of ``target``; with ``recheck``, only what the last run did not
    kill, in its folder, against the tests and code as they are now (new tests included;
    the mutants of a changed function are made anew and left unchecked, for the next
    recheck); with ``only`` too, the mutants whose names match one of its globs, whatever
    their verdict (those new tests were written for, when a whole recheck takes too long)."""
    if recheck:
        before = results(target) or {}
        # and those whose verdict is carried over from before a recheck that made them
        # anew (their function changed): counted killed, but never checked since
        carried = carried_over(target)
        names = sorted(n for n, s in before.items() if s not in KILLED or n in carried)
        if only:
            names = sorted(n for n in before if any(fnmatch.fnmatchcase(n, g) for g in only))
        if not names:
            print(f"== {target}: no survivors to recheck", flush=True)
            return
        work = WORK / target
        # A changed configuration (a test file added to the target) makes mutmut make
        # every mutant anew, unchecked: the verdicts so far are kept for results().
        (work / EARLIER).write_text(json.dumps(before, indent=0, sort_keys=True))
        write_config(target, work)
        fresh_core(work)
    else:
        work, names = prepare(target), TARGETS[target][1]
    env = dict(os.environ, CI="true", PYTHONPATH=str(ROOT / "src"))  # derandomized hypothesis
    print(f"== {target}: mutmut run in {work}", flush=True)
    with open(work / "mutmut.log", "a" if recheck else "w") as log:
        # mutmut's own session: an interrupt or a failure here stops its fork server and
        # workers too, which outlive a killed mutmut and go on writing its verdicts.
        proc = subprocess.Popen(
            [sys.executable, "-m", "mutmut", "run", *names],
            cwd=work, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            proc.wait()
        finally:
            stop_group(proc)


def fresh_core(work: Path) -> None:
    """Today's compiled core into a recheck's copy of the sources: mutmut copies src/ into
    its mutants/ folder once, with the core of that day, and a test of a function the
    core has gained since fails to import there ("failed to collect stats")."""
    lib = work / "mutants" / "src" / "exactbatch"
    if not lib.is_dir():
        return
    for old in lib.glob("_core*.so"):
        old.unlink()
    for built in (ROOT / "src" / "exactbatch").glob("_core*.so"):
        shutil.copy2(built, lib / built.name)


class one_run:
    """Refuses a second run of a target while one goes on (two runs in one folder write
    the same verdict files, and a fresh run deletes the folder): beside the target's
    folder, a mark holds the running process's id while it runs."""

    def __init__(self, target: str) -> None:
        self.mark = WORK / f".{target}.running"

    def __enter__(self) -> None:
        try:
            pid = int(self.mark.read_text())
        except (OSError, ValueError):
            pid = None
        if pid is not None and pid != os.getpid() and _alive(pid):
            raise SystemExit(f"{self.mark}: a run (pid {pid}) goes on; stop it first")
        WORK.mkdir(parents=True, exist_ok=True)
        self.mark.write_text(str(os.getpid()))

    def __exit__(self, *exc: object) -> None:
        self.mark.unlink(missing_ok=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_group(proc: subprocess.Popen[bytes]) -> None:
    """Stop a process started in its own session and every process of that session: a
    polite SIGTERM, then, whatever is left of the group, SIGKILL."""
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return  # no process of the group is left
        try:
            proc.wait(timeout=wait)
        except subprocess.TimeoutExpired:
            pass


def results(target: str) -> dict[str, str] | None:
    """Each selected mutant's status, from mutmut's files (the core's: from its runner's,
    less those that did not compile); None if never run."""
    if target == "core":
        res = core_results()
        if res is None:
            return None
        return {k: r["status"] for k, r in res.items() if r["status"] not in NOT_COUNTED}
    out = _mutmut_results(target)
    if out is None:
        return None
    earlier = WORK / target / EARLIER
    if earlier.exists():  # a mutant a recheck left unchecked keeps its verdict before it
        was = json.loads(earlier.read_text())
        for name, status in out.items():
            if status == "not checked" and name in was:
                out[name] = was[name]
    return out


def _mutmut_results(target: str) -> dict[str, str] | None:
    """Each selected mutant's status in mutmut's own files (none carried over)."""
    from mutmut.stats import status_by_exit_code

    metas = sorted((WORK / target / "mutants").rglob("*.meta"))
    if not metas:
        return None
    globs = TARGETS[target][1]
    out = {}
    for meta in metas:
        for name, code in json.loads(meta.read_text())["exit_code_by_key"].items():
            if any(fnmatch.fnmatchcase(name, g) for g in globs):
                out[name] = status_by_exit_code[code]
    return out


def carried_over(target: str) -> set[str]:
    """The mutants ``results`` gives a verdict from before the last recheck (mutmut made
    them anew, unchecked): the next recheck checks them too."""
    if target == "core":
        return set()
    now, was = _mutmut_results(target) or {}, results(target) or {}
    return {n for n, s in now.items() if s == "not checked" and was.get(n) != s}


# -- the compiled core -------------------------------------------------------------------
#
# One-line mutations of the C sources (every `_core*.c` and `_core*.h`), each applied to
# a worker's copy of src/ and tests/ (never to this checkout's), built with `setup.py
# build_ext --inplace` there, and the core's tests run against it with that copy first
# on PYTHONPATH (the tests' child processes inherit it, so they see the mutant too). A
# mutant that does not compile, or compiles to the same code as the unmutated core
# (its library stripped of symbols and debug data is byte for byte the same: dead
# code, another platform's branch), is left out of the count. The mutants are a fixed
# sample of every site: a mutant is kept when the SHA-256 of its key (file, the line's
# text and its occurrence, the column, the mutation; not the line number, so that an
# edit elsewhere keeps the sample) falls below CORE_SAMPLE per mille.

CORE_SOURCES = ("src/exactbatch", "_core*.[ch]")
CORE_SAMPLE = 130  # per mille of the sites: ~230 mutants (~15 fail to compile), ~30 minutes
CORE_WORKERS = 2
# The tests that read through the core: its own edges, the kernels (gathers, casts,
# checks, the guard's truncations in child processes), a dataset's parts, a file's reads
# and changes, the guard; the NumPy path's own cases and EXACTBATCH_PURE's parsing left
# out.
CORE_TESTS = [
    "tests/test_core.py",
    "tests/test_core_split.py",
    "tests/test_kernels.py",
    "tests/test_parts.py",
    "tests/test_hand_kernels.py",
    "tests/ndf/test_ndf_dataset.py",
    "tests/ndf/test_file.py",
    "tests/ndf/test_file_runs.py",
    "tests/ndf/test_dataset_runs.py",
    "tests/ndf/test_guard.py",
    "-k",
    "not exactbatch_pure and not [numpy and not -numpy]",
]
BIJECTION_TESTS = ["tests/order/test_bijection.py"]
# categorical strings' keys, codes and dictionary take (_core_codes.c), on the compiled path
CODES_TESTS = [
    "tests/sources/test_dictionary_codes.py",
    "tests/sources/test_string_keys.py",
    "tests/sources/test_plain_string_codes.py",
    "-k",
    "not numpy",
]
# a float32 shuffle buffer's gather (_core_rows32.c): against its NumPy twin, its
# refusals, and the buffer's batches against the float64 buffer's
ROWS32_TESTS = ["tests/batching/test_buffer_float32.py"]
# next_into's common call in one (_core_into.c): the same bytes, states and counts as its
# pure twin and the Python path, its refusals, threads sharing it
INTO_TESTS = ["tests/loader/test_handout.py"]
# iter()'s hand-out in one call (_core_iter.c): the same bytes, states and counts as its
# pure twin and the iterator's path in Python, what it leaves to that path, threads
ITER_TESTS = ["tests/loader/test_iter_step.py"]
CORE_GROUPS = {
    "core": CORE_TESTS,
    "bijection": BIJECTION_TESTS,
    "codes": CODES_TESTS,
    "rows32": ROWS32_TESTS,
    "into": INTO_TESTS,
    "iter": ITER_TESTS,
}
# The tests of a mutant by its file: the bijection, the codes, the float32 gather and the
# two hand-outs in one call (next_into's, iter()'s) have their own; the hand-out's steps
# they share (_core_hand.c) run the core's and both calls'; the module table and the
# shared header run them all; every other file the core's.
CORE_TESTS_OF = {
    "_core_bijection": ["bijection"],
    "_core_codes": ["codes"],
    "_core_rows32": ["rows32"],
    "_core_into": ["into"],
    "_core_iter": ["iter"],
    "_core_hand": ["core", "into", "iter"],  # (Cursor.hand and a wait's record: both calls')
    "_core_parts_run": ["core", "into", "iter"],  # (a dataset's runs: both calls read them)
    "_core": ["core", "bijection", "codes", "rows32", "into", "iter"],
}
# Calls that only give back memory, a buffer or a reference (dropping one leaks, which no
# test of behaviour sees: a leak test is a memory measurement), or only hint (a prefetch:
# dropping it changes the speed alone): not dropped.
NOT_DROPPED = {
    "__builtin_prefetch",
    "tp_free",
    "PyBuffer_Release",
    "Py_DECREF",
    "Py_XDECREF",
    "Py_CLEAR",
    "PyMem_Free",
    "PyMem_RawFree",
    "munmap",
}
# comparisons: the boundary moved and the direction turned (`<` for `>`: the inverted check)
SWAPS = {
    "<": ["<=", ">"],
    "<=": ["<", ">="],
    ">": [">=", "<"],
    ">=": [">", "<="],
    "==": ["!="],
    "!=": ["=="],
    "&&": ["||"],
    "||": ["&&"],
    "+=": ["-="],
    "-=": ["+="],
    "|=": ["&="],
}
_TOKEN = re.compile(
    r"(?P<num>\b(?:0[xX][0-9a-fA-F]+|\d+)(?P<suffix>[uUlL]*)\b)"
    r"|(?P<op><<=|>>=|->|\+\+|--|<<|>>|<=|>=|==|!=|&&|\|\||[-+*/%&|^]=|[-+*/%<>&|^!=~?:;,(){}\[\].])"
    r"|(?P<id>[A-Za-z_]\w*)"
)
_ARRAY_DECL = re.compile(r"^\s*(static\s+)?(const\s+)?(struct\s+)?\w+\s+\**\w+\[\d+\]")


def mask_c(text: str) -> str:
    """``text`` with its comments and string and character literals blanked (same length,
    newlines kept): what is left is code."""
    out, i, n = list(text), 0, len(text)
    while i < n:
        two = text[i : i + 2]
        if two in ("/*", "//"):
            end = text.find("*/", i + 2) + 2 if two == "/*" else text.find("\n", i)
            end = n if end < 2 or end == -1 else end
        elif text[i] in "\"'":
            end = i + 1
            while end < n and text[end] != text[i]:
                end += 2 if text[end] == "\\" else 1
            end += 1
        else:
            i += 1
            continue
        for k in range(i, min(end, n)):
            out[k] = out[k] if text[k] == "\n" else " "
        i = end
    return "".join(out)


@dataclass(frozen=True)
class CMutant:
    key: str  # stable: file, the line's text (hashed) and occurrence, column, mutation
    path: str  # from the checkout's root
    line: int  # 1-based, in today's file
    before: str
    after: str
    op: str


def _close_paren(code: str, at: int) -> int:
    """The index of the ``)`` that closes the ``(`` at ``at`` on this line, or -1."""
    depth = 0
    for k in range(at, len(code)):
        depth += {"(": 1, ")": -1}.get(code[k], 0)
        if depth == 0:
            return k
    return -1


def _line_mutants(code: str) -> list[tuple[int, int, str, str]]:
    """``(start, end, replacement, op)`` for each mutation of one line of code (masked)."""
    bare = code.rstrip().removesuffix("\\").strip()  # a macro's line ends in a backslash
    if bare.startswith("#") and not re.match(r"#\s*define\s+\w+", bare):
        return []  # #include, #if...: not code that runs
    if bare.startswith("__builtin_prefetch("):
        return []  # a hint: whatever address it is given, only the speed changes
    toks = list(_TOKEN.finditer(code))
    words = [t.group() for t in toks]
    out = []
    for k, t in enumerate(toks):
        word, prev, nxt = t.group(), words[k - 1] if k else "", words[k + 1 : k + 2]
        if t.lastgroup == "op" and word in SWAPS:
            out += [(t.start(), t.end(), new, f"{word} -> {new}") for new in SWAPS[word]]
        elif word in ("+", "-") and k and (toks[k - 1].lastgroup != "op" or prev in ")]"):
            new = "-" if word == "+" else "+"  # binary only (a unary minus is a sign)
            out.append((t.start(), t.end(), new, f"{word} -> {new}"))
        elif word == "!":
            out.append((t.start(), t.end(), "", "! dropped"))
        elif t.lastgroup == "num":
            if prev == "[" and nxt == ["]"] and _ARRAY_DECL.match(code):
                continue  # an array's size: a larger one changes nothing
            suffix = t.group("suffix")
            digits = word[: len(word) - len(suffix)]
            value = int(digits, 0)
            new = 0 if value == 1 else value + 1
            shown = (hex(new) if digits.lower().startswith("0x") else str(new)) + suffix
            out.append((t.start(), t.end(), shown, f"{word} -> {shown}"))
        elif word == "if" and nxt == ["("]:
            close = _close_paren(code, toks[k + 1].start())
            if close > 0:
                out.append((toks[k + 1].start(), close + 1, "(0)", "if: check dropped"))
    statement = (
        words[:1] in (["return"], ["goto"], ["break"], ["continue"], ["*"])  # *out = ...
        or (len(toks) > 1 and toks[0].lastgroup == "id" and toks[1].lastgroup == "op")
    )
    if (
        statement
        and bare.endswith(";")
        and bare.count("(") == bare.count(")")
        and not NOT_DROPPED & set(words)
        and words[0] not in ("if", "for", "while", "switch", "case", "else", "do")
        and words[1:2] != ["*"]  # a declaration: `PyObject *exc = ...;`
    ):
        start = code.index(bare[0])
        out.append((start, start + len(bare), ";", "statement dropped"))
    return out


def core_mutants(sample: int = CORE_SAMPLE) -> list[CMutant]:
    """Every mutant of today's C sources kept by the sample (``sample`` per mille of the
    sites), in file and line order."""
    folder, pattern = CORE_SOURCES
    out = []
    for path in sorted((ROOT / folder).glob(pattern)):
        text = path.read_text()
        rel = os.fspath(path.relative_to(ROOT))
        seen: dict[str, int] = {}
        for number, (line, code) in enumerate(
            zip(text.split("\n"), mask_c(text).split("\n"), strict=True), 1
        ):
            digest = hashlib.sha256(line.strip().encode()).hexdigest()[:12]
            seen[digest] = seen.get(digest, 0) + 1
            indent = len(line) - len(line.lstrip())
            for a, b, new, op in _line_mutants(code):
                key = f"{rel}:{digest}.{seen[digest]}:{a - indent}:{op}"
                if int(hashlib.sha256(key.encode()).hexdigest(), 16) % 1000 >= sample:
                    continue
                out.append(CMutant(key, rel, number, line, line[:a] + new + line[b:], op))
    return out


def _groups_of(path: str) -> list[str]:
    return CORE_TESTS_OF.get(Path(path).stem, ["core"])


class _Worker:
    """A copy of the sources to mutate and build: build/mutants/core/wK."""

    def __init__(self, k: int):
        self.dir = WORK / "core" / f"w{k}"
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir.mkdir(parents=True)
        # src and tests as they are now (editing them while a run goes on changes nothing)
        skip = shutil.ignore_patterns("*.so", "*.pyd", "__pycache__", "*.egg-info")
        for name in ("src", "tests"):
            shutil.copytree(ROOT / name, self.dir / name, ignore=skip)
        for name in ("pyproject.toml", "setup.py", "README.md"):
            shutil.copy(ROOT / name, self.dir / name)
        self.env = dict(os.environ, CI="true", PYTHONPATH=str(self.dir / "src"))
        self.env.pop("EXACTBATCH_PURE", None)
        self.unmutated: str | None = None  # build()'s digest of the unmutated core

    def build(self) -> str | None:
        """Build the copy's core in place: the digest of its library stripped of symbols,
        debug data and build id (the code alone), or None if it did not compile (an
        optional extension that fails to compile leaves no library, and exits 0)."""
        lib = self.dir / "src" / "exactbatch"
        for old in lib.glob("_core.*.so"):
            old.unlink()
        subprocess.run(
            [sys.executable, "setup.py", "-q", "build_ext", "--inplace", "--force",
             "--build-temp", "build/temp"],
            cwd=self.dir, env=self.env, capture_output=True, timeout=300, check=False,
        )  # fmt: skip
        built = next(lib.glob("_core.*.so"), None)
        if built is None:
            return None
        code = self.dir / "build" / "stripped.so"
        strip = ["strip", "--strip-all", "--remove-section=.note.gnu.build-id", "-o"]
        r = subprocess.run([*strip, code, built], capture_output=True, check=False)
        read = code if r.returncode == 0 else built  # no GNU strip: no binary is the same
        return hashlib.sha256(read.read_bytes()).hexdigest()

    def test(self, groups: list[str], timeout: float) -> str:
        """Run each group of tests (stopping at the first failure): the mutant's status."""
        deadline = time.monotonic() + timeout
        for group in groups:
            args = CORE_GROUPS[group]
            cmd = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-x", *args]
            with open(self.dir / "pytest.log", "w") as log:  # the last run's output
                proc = subprocess.Popen(
                    cmd, cwd=self.dir, env=self.env, start_new_session=True,
                    stdout=log, stderr=subprocess.STDOUT,
                )  # fmt: skip
                try:
                    rc = proc.wait(timeout=max(1.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)  # the tests' child processes too
                    proc.wait()
                    return "timeout"
            if rc < 0:
                return "segfault"  # pytest itself died of a signal (a crash in the core)
            if rc in (4, 5):
                raise RuntimeError(f"{cmd}: pytest exit code {rc} (bad arguments?)")
            if rc != 0:
                return "killed"  # failed tests (1), or an import that failed (2)
        return "survived"

    def run(self, m: CMutant, original: str, timeouts: dict[str, float]) -> str:
        target = self.dir / m.path
        text = original.split("\n")
        text[m.line - 1] = m.after
        target.write_text("\n".join(text))
        try:
            built = self.build()
            if built is None:
                return "no compile"
            if built == self.unmutated:
                return "same binary"  # the compiler made the same code: an equivalent mutant
            groups = _groups_of(m.path)
            return self.test(groups, sum(timeouts[g] for g in groups))
        finally:
            target.write_text(original)


def core_results() -> dict[str, dict] | None:
    """Each mutant of the last core run, by key: its record and ``status``."""
    path = WORK / "core" / "results.json"
    return json.loads(path.read_text()) if path.exists() else None


def _log(line: str) -> None:
    print(line, flush=True)
    with open(WORK / "core" / "run.log", "a") as f:
        print(line, file=f)


def _save(records: dict[str, dict]) -> None:
    path = WORK / "core" / "results.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(records, indent=1))
    tmp.replace(path)


def run_core(recheck: bool = False, sample: int = CORE_SAMPLE) -> None:
    """The core's mutants, ``sample`` per mille of the sites, CORE_WORKERS at a time: a
    fresh run, or with ``recheck`` only those of today's sources the last run did not
    kill (survived or not checked) or did not have (the mutants of lines changed since:
    the old ones are gone), against today's tests."""
    mutants = core_mutants(sample)
    if recheck:
        last = core_results() or {}
        # today's mutants only, where they are today
        records = {m.key: {**last[m.key], **asdict(m)} for m in mutants if m.key in last}
        done = KILLED | NOT_COUNTED
        mutants = [m for m in mutants if records.get(m.key, {}).get("status") not in done]
        if not mutants:
            print("== core: nothing to recheck", flush=True)
            return
    else:
        shutil.rmtree(WORK / "core", ignore_errors=True)
        records = {}
    (WORK / "core").mkdir(parents=True, exist_ok=True)
    for m in mutants:  # (line numbers as today)
        records[m.key] = {**asdict(m), "status": "not checked", "seconds": None}
    _save(records)
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        # started in the background (`&`, nohup): SIGINT comes ignored, and the tests'
        # processes would inherit that (the tests of a Ctrl-C need it delivered)
        signal.signal(signal.SIGINT, signal.default_int_handler)
    workers = [_Worker(k) for k in range(CORE_WORKERS)]
    _log(f"== core: {len(mutants)} mutants, {len(workers)} workers in {WORK / 'core'}")
    # The unmutated core must build and pass; each group's time sets its timeout (twice
    # that, and half a minute: a mutant that loops forever costs that much).
    for w in workers:
        w.unmutated = w.build()
        if w.unmutated is None:
            sys.exit("core: the unmutated core does not build")
    timeouts = {}
    for group in CORE_GROUPS:
        t = time.monotonic()
        if workers[0].test([group], timeout=3600) != "survived":
            sys.exit(
                f"core: the {group} tests fail on the unmutated core (see "
                f"{workers[0].dir / 'pytest.log'}); fix that first"
            )
        timeouts[group] = 2 * (time.monotonic() - t) + 30
    originals = {p: (ROOT / p).read_text() for p in {m.path for m in mutants}}
    free: Queue = Queue()
    for w in workers:
        free.put(w)

    def one(m: CMutant) -> None:
        w = free.get()
        try:
            t = time.monotonic()
            status = w.run(m, originals[m.path], timeouts)
            records[m.key].update(status=status, seconds=round(time.monotonic() - t, 1))
            _save(records)
            _log(f"   {status:10s} {m.path}:{m.line}: {m.op} ({records[m.key]['seconds']} s)")
        finally:
            free.put(w)

    with ThreadPoolExecutor(len(workers)) as pool:
        for future in [pool.submit(one, m) for m in mutants]:
            future.result()


def _where(record: dict | None, name: str):
    """A survivor as listed: a core mutant by file, line and change, sorted so; else its name."""
    if record is None:
        return name
    return f"{record['path']}:{record['line']:<4d} {record['op']}"


def summary(targets: list[str], diff: bool) -> None:
    for target in targets:
        res = results(target)
        if res is None:
            print(f"{target:9s} not run")
            continue
        killed = sum(s in KILLED for s in res.values())
        total = len(res)
        rest = {n: s for n, s in res.items() if s not in KILLED}
        rate = 100 * killed / total if total else 0.0
        print(
            f"{target:9s} killed {killed:4d}  survived {total - killed:4d}  total {total:4d}"
            f"  kill rate {rate:5.1f}%"
        )
        unchecked = sum(s == "not checked" for s in res.values())
        log = WORK / target / ("run.log" if target == "core" else "mutmut.log")
        if unchecked:
            print(
                f"    {unchecked} not checked: the run stopped early "
                f"(see {log}); they count as not killed"
            )
            rest = {n: s for n, s in rest.items() if s != "not checked"}
        carried = len(carried_over(target))
        if carried:
            print(
                f"    {carried} verdicts carried over from before the last recheck "
                "(made anew, not checked since; the next --recheck checks them)"
            )
        core = core_results() if target == "core" else {}
        for name, status in sorted(rest.items(), key=lambda i: _where(core.get(i[0]), i[0])):
            print(f"    {status:10s} {_where(core.get(name), name)}")
            if diff and target == "core":
                r = core[name]
                print(f"        - {r['before'].strip()}\n        + {r['after'].strip()}")
            elif diff:
                show = subprocess.run(
                    [sys.executable, "-m", "mutmut", "show", name],
                    cwd=WORK / target,
                    capture_output=True,
                    text=True,
                    check=False,
                )
                print("        " + show.stdout.strip().replace("\n", "\n        "))


def code_lines(path: Path) -> int:
    """The lines of ``path`` that hold code: not blank, not only a comment, not a docstring."""
    text = path.read_text()
    docstrings = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                docstrings.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    layout = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
    lines: set[int] = set()
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type not in layout and tok.type != tokenize.ENDMARKER:
            lines.update(range(tok.start[0], tok.end[0] + 1))
    return len(lines - docstrings)


def uncovered() -> dict[str, int]:
    """The Python modules of src/ (``__init__.py`` included) that no target mutates, with
    their lines of code (:func:`code_lines`); the core's C sources are the ``core``
    target's."""
    globs = [g for mutated, _, _ in TARGETS.values() for g in mutated]
    out = {}
    for path in sorted((ROOT / "src").rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if not any(fnmatch.fnmatchcase(rel, g) for g in globs):
            out[rel] = code_lines(path)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("targets", nargs="*", help=f"some of {', '.join(ALL)} (default: all)")
    ap.add_argument("--summary", action="store_true", help="print the last results, run nothing")
    ap.add_argument("--diff", action="store_true", help="show each survivor's change")
    ap.add_argument(
        "--recheck",
        action="store_true",
        help="run only what the last run did not kill, in its folder, against today's "
        "tests and code (mutmut makes the mutants of changed functions anew, unchecked; "
        "run --recheck until none is left unchecked; a new pragma shows in a fresh run)",
    )
    ap.add_argument(
        "--only",
        action="append",
        metavar="GLOB",
        help="with --recheck: the mutants whose names match GLOB (repeatable), whatever "
        "their verdict, instead of all those not killed",
    )
    ap.add_argument(
        "--sample",
        type=int,
        default=CORE_SAMPLE,
        metavar="PER_MILLE",
        help=f"core: the share of the C sources' mutation sites run (default {CORE_SAMPLE})",
    )
    ap.add_argument(
        "--uncovered",
        action="store_true",
        help="list the modules no target mutates, with their lines of code",
    )
    args = ap.parse_args()
    # Stopped by Ctrl-C or a kill, a run stops mutmut's whole session (run's finally): so
    # both signals raise here, even where SIGINT came ignored (a job started with `&`).
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    if args.uncovered:
        print("\n".join(f"{lines:5d}  {path}" for path, lines in uncovered().items()))
        return
    targets = args.targets or ALL
    unknown = [t for t in targets if t not in ALL]
    if unknown:
        ap.error(f"unknown target(s) {unknown}; expected some of {ALL}")
    if args.only and not (args.recheck and "core" not in targets):
        ap.error("--only goes with --recheck of mutmut's targets")
    if not args.summary:
        for target in targets:
            with one_run(target):
                if target == "core":
                    run_core(args.recheck, args.sample)
                else:
                    run(target, args.recheck, args.only)
    summary(targets, args.diff)


if __name__ == "__main__":
    try:
        main()
    except KeyboardInterrupt:
        sys.exit("stopped: mutmut and its workers too (the verdicts so far are kept)")
