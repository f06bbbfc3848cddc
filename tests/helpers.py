"""Shared builders for the tests: data, chunk streams and Parquet files whose rows can be traced.

Row ``i`` of everything built here is a known function of ``i``:

    x[i, 0] = i,  x[i, j] = i * (j + 1) + j / 4   (j >= 1)
    y[i, k] = -(i + 1) * (k + 1) - 1 / 8

so a batch's row ids are ``xb[:, 0]`` (:func:`ids`) and :func:`check_rows`
proves every value in a batch (features and labels) came from those very
rows - no garbage, no mixing of one row's x with another row's y. All values
are exact in float64 for the sizes used in the tests.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np

from exactbatch import DataLoader, Dataset, open_ndf, save_ndf, save_ndf_dataset

__all__ = [
    "SOURCE_KINDS",
    "check_rows",
    "chunk_bounds",
    "chunks_of",
    "collect",
    "fifo",
    "ids",
    "ids_of",
    "into_buffers",
    "make_data",
    "make_source",
    "make_x",
    "make_y",
    "next_into_ids",
    "part_file",
    "rows_of",
    "run_cli",
    "write_ndf_dataset",
    "write_parquet",
]

SOURCE_KINDS = ("pair", "dataset", "array", "ndf")


def make_x(row_ids, d: int) -> np.ndarray:
    """Features of rows ``row_ids``: shape (len(row_ids), d), float64, column 0 the id."""
    i = np.asarray(row_ids, dtype=np.float64).reshape(-1, 1)
    j = np.arange(d, dtype=np.float64).reshape(1, -1)
    return np.ascontiguousarray(i * (j + 1) + j / 4)


def make_y(row_ids, l: int) -> np.ndarray:  # noqa: E741
    """Labels of rows ``row_ids``: shape (len(row_ids), l), float64."""
    i = np.asarray(row_ids, dtype=np.float64).reshape(-1, 1)
    k = np.arange(l, dtype=np.float64).reshape(1, -1)
    return np.ascontiguousarray(-(i + 1) * (k + 1) - 0.125)


def make_data(n: int, d: int = 3, l: int = 1) -> tuple[np.ndarray, np.ndarray]:  # noqa: E741
    """``(x, y)`` of n traceable rows (x[i, 0] == i); y has shape (n, l)."""
    rows = np.arange(n)
    return make_x(rows, d), make_y(rows, l)


def make_source(kind: str, x: np.ndarray, y: np.ndarray, folder=None):
    """The same rows as a random-access source of kind ``kind``.

    ``"pair"``: ``(x, y)``; ``"dataset"``: ``Dataset(x, y)``; ``"array"``:
    bare ``x`` (only when y has no columns); ``"ndf"``: an open NdfFile of
    a file written into ``folder``.
    """
    if kind == "pair":
        return (x.copy(), y.copy())
    if kind == "dataset":
        return Dataset(x.copy(), y.copy())
    if kind == "array":
        assert y.shape[1] == 0, "a bare array source has no labels"
        return x.copy()
    if kind == "ndf":
        assert folder is not None
        path = os.path.join(os.fspath(folder), f"data-{x.shape[0]}-{x.shape[1]}-{y.shape[1]}.ndf")
        save_ndf(path, (x, y))
        return open_ndf(path)
    raise AssertionError(f"unknown source kind {kind!r}")


def chunk_bounds(sizes) -> list[tuple[int, int]]:
    """``[(lo, hi), ...]``: the row ids of each chunk when chunks hold ``sizes`` rows."""
    out, lo = [], 0
    for s in sizes:
        out.append((lo, lo + int(s)))
        lo += int(s)
    return out


def chunks_of(sizes, d: int = 3, l: int = 1) -> list:  # noqa: E741
    """A list of ``(x, y)`` chunks of ``sizes`` rows (``x`` alone when l == 0)."""
    out = []
    for lo, hi in chunk_bounds(sizes):
        r = np.arange(lo, hi)
        out.append(make_x(r, d) if l == 0 else (make_x(r, d), make_y(r, l)))
    return out


class Closable:
    """An iterator over ``items`` that records whether its ``close()`` was called. Not a
    generator, so nothing else (the garbage collector) closes it; every one made is
    appended to the list ``made`` when one is passed."""

    def __init__(self, items, made: list | None = None):
        self.it, self.closed = iter(items), False
        if made is not None:
            made.append(self)

    def __iter__(self):
        return self

    def __next__(self):
        return next(self.it)

    def close(self):
        self.closed = True


class ClosableChunks(Closable):
    """A :class:`Closable` over ``chunks_of(sizes, d, l)``:
    ``DataLoader(lambda: ClosableChunks(sizes, made=opened), ...)``."""

    def __init__(self, sizes, d: int = 2, l: int = 1, made: list | None = None):  # noqa: E741
        super().__init__(chunks_of(sizes, d, l), made)


def wait_until_prefetched(it, timeout=30.0):
    """Wait (polling, bounded) until the iterator's prefetch thread has filled its queue
    or ended: the batches it prepared are ready and not yet received."""
    prefetcher = it._prefetcher
    deadline = time.monotonic() + timeout
    while not (prefetcher.full() or not prefetcher._thread.is_alive()):
        assert time.monotonic() < deadline, "the prefetch thread prepared nothing"
        time.sleep(0.001)


def ids(xb: np.ndarray) -> list[int]:
    """Row ids of one batch (column 0 holds the row number), as a list of ints."""
    return xb[:, 0].astype(np.int64).tolist()


def unpad(batch, batch_size: int | None = None) -> tuple:
    """The real rows of a batch of ``even_batches="pad"`` (its last element a bool
    mask), checked: every array ``len(mask)`` rows (``batch_size``, when given), the
    mask True for a prefix of the rows and False after, padded rows zero (row ids -1).
    Any other batch is returned as it is."""
    last = batch[-1]
    if not (isinstance(last, np.ndarray) and last.dtype == bool):
        return tuple(batch)
    *arrays, mask = batch
    b = len(mask)
    assert mask.shape == (b,), f"mask of shape {mask.shape}"
    assert batch_size is None or b == batch_size, f"a padded batch of {b} rows, not {batch_size}"
    r = int(mask.sum())
    assert mask[:r].all() and not mask[r:].any(), f"mask {mask.tolist()} is not real rows first"
    for a in arrays:
        assert a.shape[0] == b, f"a padded batch's array has {a.shape[0]} rows, not {b}"
        if a.ndim == 1:  # row ids
            assert (a[r:] == -1).all(), f"padded rows' ids {a[r:].tolist()}, not -1"
        else:
            assert not a[r:].any(), "padded rows are not zeros"
    return tuple(a[:r] for a in arrays)


def ids_of(batch) -> list[int]:
    """Row ids of one batch, ``(xb, yb)`` or ``(xb, yb, rows)`` (``with_rows=True``),
    from column 0; a third element must be exactly those ids, as a 1-D int64 array:
    the loader's ids are checked against the rows they came with. A padded batch
    (``even_batches="pad"``): its real rows' (:func:`unpad`)."""
    batch = unpad(batch)
    got = ids(batch[0])
    if len(batch) > 2:
        rows = batch[2]
        assert isinstance(rows, np.ndarray) and rows.dtype == np.int64, f"rows: {rows!r}"
        assert rows.shape == (len(got),), f"rows of shape {rows.shape} for {len(got)} rows"
        assert rows.tolist() == got, f"the batch's row ids {rows.tolist()} are not its rows {got}"
    return got


def into_buffers(loader, d: int | None = None, l: int | None = None) -> tuple:  # noqa: E741
    """``next_into``'s buffers for ``loader``, filled with garbage (NaN, -1): ``(bx, by)``,
    and ``brows`` too when the loader hands out row ids (``with_rows=True``)."""
    d = loader.d if d is None else d
    l = loader.l if l is None else l  # noqa: E741
    dtype = getattr(loader, "dtype", np.float64)
    bx = np.full((loader.batch_size, d), np.nan, dtype=dtype)
    by = np.full((loader.batch_size, l), np.nan, dtype=dtype)
    if getattr(loader, "with_rows", False):
        return bx, by, np.full(loader.batch_size, -1, dtype=np.int64)
    return bx, by


def rows_of(batches) -> list[list[int]]:
    """Row ids of each batch of ``batches`` (an iterable of ``(xb, yb)``), unchecked."""
    return [ids(xb) for xb, _ in batches]


def check_rows(xb, yb, d: int, l: int, dtype=np.float64) -> None:  # noqa: E741
    """Assert a batch is ``dtype`` (float64 unless told) (rows, d) / (rows, l) and every
    row is an intact source row (cast to ``dtype``)."""
    assert isinstance(xb, np.ndarray) and isinstance(yb, np.ndarray)
    assert xb.dtype == dtype and yb.dtype == dtype
    assert xb.ndim == 2 and yb.ndim == 2
    assert xb.shape[1] == d and yb.shape[1] == l
    assert xb.shape[0] == yb.shape[0]
    r = ids(xb)
    np.testing.assert_array_equal(xb, make_x(r, d).astype(dtype))
    np.testing.assert_array_equal(yb, make_y(r, l).astype(dtype))


def collect(loader, d: int | None = None, l: int | None = None) -> list[list[int]]:  # noqa: E741
    """Row ids of each batch of one epoch through ``iter(loader)``, checking every row
    (of the loader's dtype), and the batch's row ids where it carries them."""
    out = []
    dtype = getattr(loader, "dtype", np.float64)
    for batch in loader:
        batch = unpad(batch, loader.batch_size)
        xb, yb = batch[0], batch[1]
        d_, l_ = xb.shape[1] if d is None else d, yb.shape[1] if l is None else l
        check_rows(xb, yb, d_, l_, dtype)
        out.append(ids_of(batch))
    return out


def next_into_ids(
    loader: DataLoader,
    d: int | None = None,
    l: int | None = None,  # noqa: E741
    limit: int | None = None,
) -> list[list[int]]:
    """Row ids of the batches ``next_into`` writes until it returns 0 (or ``limit``),
    checking every row (and the row ids written, with ``with_rows=True``); ``d`` and
    ``l`` default to the loader's."""
    d = loader.d if d is None else d
    l = loader.l if l is None else l  # noqa: E741
    dtype = getattr(loader, "dtype", np.float64)
    buffers = into_buffers(loader, d, l)
    out = []
    while limit is None or len(out) < limit:
        got = loader.next_into(*buffers)
        if got == 0:
            break
        check_rows(buffers[0][:got], buffers[1][:got], d, l, dtype)
        out.append(ids_of([b[:got] for b in buffers]))
    return out


def write_ndf_dataset(path, sizes, d: int = 3, l: int = 1, **kw) -> str:  # noqa: E741
    """A sharded dataset at ``path`` of traceable rows ``0 .. sum(sizes)``, part k holding
    ``sizes[k]`` of them in order (so it equals one .ndf of ``make_data(sum(sizes))``)."""
    parts = [
        (make_x(np.arange(a, b), d), make_y(np.arange(a, b), l)) for a, b in chunk_bounds(sizes)
    ]
    save_ndf_dataset(path, parts, **kw)
    return os.fspath(path)


def until_ctime_moves(path, opened_ctime: int, change) -> None:
    """Run ``change()`` on ``path``, then put the file's modification time back (as
    ``touch -r`` or ``rsync --inplace -t`` do), so that only its change time (ctime)
    tells. The put-back repeats until ctime differs from ``opened_ctime`` (on a coarse
    clock a change in the same tick keeps the old stamp)."""
    st = os.stat(path)
    change()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    while os.stat(path).st_ctime_ns == opened_ctime:
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert os.stat(path).st_mtime_ns == st.st_mtime_ns


def rewrite_in_place(path, offset: int = 28, values: int = 20) -> None:
    """Write other bytes over ``values`` floats of ``path`` from ``offset``, in place."""
    with open(path, "r+b") as g:
        g.seek(offset)
        g.write(np.full(values, 7.0).tobytes())


def part_file(path, k: int) -> str:
    """The file of part ``k`` of the dataset folder ``path``, as its manifest names it
    (``part-0000k-<write id>.ndf``)."""
    with open(os.path.join(path, "manifest.json")) as f:
        return os.path.join(path, json.load(f)["parts"][k]["name"])


def coded_ids(row_ids) -> list[str]:
    """Row ids as the strings of a categorical column coded back to the ids: zero-padded,
    so that the learned (sorted) vocabulary of ids 0..n-1 codes id ``i`` as ``i``, and
    so does the vocabulary given as ``coded_ids(range(n))``."""
    return [f"{int(i):06d}" for i in row_ids]


def write_parquet(
    path,
    group_sizes,
    first_id: int = 0,
    *,
    d: int = 3,
    l: int = 1,  # noqa: E741
    order=None,
    id_type=None,
) -> list[tuple[int, int]]:
    """Write rows ``first_id, first_id+1, ...`` to ``path``, one row group per size.

    Columns ``x0..x{d-1}`` (``x0`` the row id) and labels ``y0..y{l-1}``;
    ``order`` optionally permutes the column order in the file; ``id_type`` is
    ``x0``'s type (a string type: the ids as :func:`coded_ids`, a categorical
    column). Returns the (lo, hi) row ids of each row group.
    """
    import pyarrow as pa
    import pyarrow.parquet as pq

    names = [f"x{j}" for j in range(d)] + [f"y{k}" for k in range(l)]
    if order is not None:
        names = [names[i] for i in order]
    fields = []
    for name in names:
        t = id_type if (name == "x0" and id_type is not None) else pa.float64()
        fields.append((name, t))
    schema = pa.schema(fields)
    bounds = []
    lo = first_id
    with pq.ParquetWriter(os.fspath(path), schema) as w:
        for s in group_sizes:
            r = np.arange(lo, lo + s)
            x, y = make_x(r, d), make_y(r, l)
            cols = {f"x{j}": x[:, j] for j in range(d)}
            cols.update({f"y{k}": y[:, k] for k in range(l)})
            if id_type is not None:
                if pa.types.is_string(id_type) or pa.types.is_large_string(id_type):
                    cols["x0"] = pa.array(coded_ids(r), type=id_type)
                else:
                    cols["x0"] = pa.array(r, type=pa.int64()).cast(id_type)
            w.write_table(pa.table({name: cols[name] for name in names}, schema=schema))
            bounds.append((lo, lo + s))
            lo += s
    return bounds


def run_cli(*args, check=None, timeout=120):
    """Run ``python -m exactbatch.cli ARGS``; returns the CompletedProcess."""
    p = subprocess.run(
        [sys.executable, "-m", "exactbatch.cli", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check is not None:
        assert p.returncode == check, (p.returncode, p.stdout, p.stderr)
    return p


def torchrun(script, world: int, *args, timeout=300) -> subprocess.CompletedProcess:
    """``torchrun --standalone --nproc_per_node=world script *args`` on CPU (gloo), with
    this exactbatch importable in every rank."""
    import shutil

    import exactbatch

    found = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    cmd = [found] if found else [sys.executable, "-m", "torch.distributed.run"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_ADDR": "127.0.0.1"}
    src = os.path.dirname(os.path.dirname(os.path.abspath(exactbatch.__file__)))
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    argv = [*cmd, "--standalone", f"--nproc_per_node={world}", str(script), *map(str, args)]
    return subprocess.run(argv, timeout=timeout, env=env, capture_output=True, text=True)


def run_compiled(code: str, *args, timeout=120):
    """Run ``code`` (dedented) in a fresh interpreter on the compiled core (a regression
    that crashes it, or hangs it until ``timeout``, fails the test, not the suite), with
    ``args`` as its argv; returns the CompletedProcess."""
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code), *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env={**os.environ, "EXACTBATCH_PURE": "0"},
    )


# A child (argv: folder, rounds, kinds, how) reads rows of a file ("file") or of the
# second of two parts of a dataset ("dataset": the gather over every part's mapping),
# truncates it and reads again, ``rounds`` times per kind: every read of a row past the
# new end faults inside the copy, and each must be an NdfError naming the file (the
# part); it prints "KIND ERRORS" per kind. ``how`` other than "nothing": after each open
# (which installs the fault guard) a SIGBUS and SIGSEGV handler is installed over it -
# "faulthandler", "signal" (a Python handler), "sigaction" (a C one: libc's _exit, so a
# fault it gets exits with status SIG) - and at the end a fault outside any copy must end
# the process as that handler (or the default) does ("signal": a SIGBUS sent first must
# reach the Python handler, printed as "sent [7]").
TRUNCATE_LOOP = textwrap.dedent(
    """
    import ctypes, faulthandler, os, signal, sys
    import numpy as np
    from exactbatch import NdfError, backend, open_ndf, open_ndf_dataset, save_ndf
    from exactbatch import save_ndf_dataset
    root, rounds, kinds, how = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    assert backend() == "compiled"
    libc = ctypes.CDLL(None)
    libc.signal.argtypes, libc.signal.restype = [ctypes.c_int, ctypes.c_void_p], ctypes.c_void_p
    sent = []

    def displace():
        for sig in (signal.SIGBUS, signal.SIGSEGV):
            if how == "faulthandler":
                faulthandler.disable()  # enable() when it is on does nothing
                faulthandler.enable()
            elif how == "signal":
                signal.signal(sig, lambda s, frame: sent.append(s))
            elif how == "sigaction":
                libc.signal(sig, ctypes.cast(libc._exit, ctypes.c_void_p).value)

    n, d = 4096, 15  # rows of 128 bytes: 32 a page
    x = np.arange(n * d, dtype=np.float64).reshape(n, d)
    rng = np.random.default_rng(0)
    for kind in kinds.split(","):
        errors = 0
        for k in range(rounds):
            if kind == "file":
                path = os.path.join(root, "shrinking.ndf")
                save_ndf(path, x)
                f, target, first = open_ndf(path), path, 0
            else:
                path = os.path.join(root, "ds")
                save_ndf_dataset(path, [x[:100], x])
                f, first = open_ndf_dataset(path), 100
                target = os.path.join(path, f.parts[1].name)
            with f:
                displace()
                read = f.rows_reader()
                out_x, out_y = np.empty((64, d)), np.empty((64, 0))
                rows = first + rng.integers(n // 2, n, 64)
                rows[0] = 0  # the dataset's first part too
                read(rows, out_x, out_y)  # the pages are mapped and read
                os.truncate(target, int(rng.integers(28, 28 + 128 * (n // 4))))
                try:
                    read(rows, out_x, out_y)
                except NdfError as e:
                    assert target in str(e), str(e)
                    errors += 1
        print(kind, errors, flush=True)
    if how == "signal":  # a SIGBUS sent (not a fault) still reaches the Python handler
        os.kill(os.getpid(), signal.SIGBUS)
        print("sent", sent, flush=True)
    if how != "nothing":
        ctypes.string_at(16)  # a fault outside any copy
        print("survived", flush=True)
    """
)


@contextlib.contextmanager
def fifo(path):
    """A FIFO at ``path``; should a reader block on it (a regression), a writer opens
    and closes it, so the reader sees an empty file and the test fails instead of hanging."""
    os.mkfifo(path)
    stop = threading.Event()

    def unblock():
        while not stop.wait(0.05):
            try:
                os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError as e:
                if e.errno not in (errno.ENXIO, errno.ENOENT):
                    raise

    t = threading.Thread(target=unblock, daemon=True)
    t.start()
    try:
        yield path
    finally:
        stop.set()
        t.join()


def reference_string_key(s: str | None) -> int:
    """The 64-bit key exactbatch.sources.string_keys documents for a string, computed with
    Python integers (an independent reference for both backends): its UTF-8 bytes as
    little-endian words of eight bytes (the last one's missing bytes zero) ``w_0 ..
    w_{m-1}``, ``sum(w_q * P**(m-1-q)) + len * C`` modulo 2**64, then SplitMix64's
    finaliser. A null: its bytes (none)."""
    m = 2**64
    data = (s or "").encode()
    words = [int.from_bytes(data[i : i + 8], "little") for i in range(0, len(data), 8)]
    x = len(data) * 0x9E3779B97F4A7C15
    for q, w in enumerate(words):
        x += w * pow(0x100000001B3, len(words) - 1 - q, m)
    x %= m
    x ^= x >> 30
    x = x * 0xBF58476D1CE4E5B9 % m
    x ^= x >> 27
    x = x * 0x94D049BB133111EB % m
    return x ^ (x >> 31)


@contextlib.contextmanager
def jax_compile_cache(folder):
    """JAX's persistent compilation cache in ``folder`` (fresh) while the block runs:
    fits of the same model and shapes (seeds are arguments, not constants) compile what
    an earlier one did from the cache instead of again. The fits run exactly as without
    it; JAX's settings are restored after."""
    import jax
    from jax.experimental.compilation_cache import compilation_cache

    names = ("jax_compilation_cache_dir", "jax_persistent_cache_min_compile_time_secs")
    saved = {name: getattr(jax.config, name) for name in names}
    jax.config.update("jax_compilation_cache_dir", str(folder))
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    compilation_cache.reset_cache()  # read the new folder (the cache is set up once)
    try:
        yield
    finally:
        for name, value in saved.items():
            jax.config.update(name, value)
        compilation_cache.reset_cache()


def stats_counts(stats: dict) -> dict:
    """The counts of a loader's ``stats()`` (nested), less the times: what two hand-out
    paths must agree on."""
    out = {}
    for k, v in stats.items():
        if isinstance(v, dict):
            out[k] = stats_counts(v)
        elif isinstance(v, int) and not k.endswith("_s"):
            out[k] = v
    return out


def state_json(loader) -> str:
    """A loader's ``state_dict()`` as canonical JSON: states compared bit for bit."""
    return json.dumps(loader.state_dict(), sort_keys=True)
