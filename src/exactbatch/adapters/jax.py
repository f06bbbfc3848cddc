"""JAX arrays from a DataLoader, moved to the device ahead of the step.

``as_jax(loader)`` is an iterable with ``len()``: each ``iter()`` is one
epoch of the loader (the loader's own rule: the next epoch, a fresh seeded
shuffle), yielding ``(xb, yb)`` ``jax.Array`` s of shapes (rows, d) and
(rows, l), or ``(xb, yb, mask)`` with ``pad_last=True`` or from a loader
built with ``even_batches="pad"`` (whose batches are full already and
carry their mask); a loader built with ``with_rows=True`` adds its row ids
after ``yb`` (a NumPy int64 array).

How the move overlaps the step: a put returns at once and copies in the
background, so the iterator keeps ``prefetch`` batches put ahead of the one
it hands out (a deque of device arrays); while a jitted step runs on batch
i, batches i+1 .. i+prefetch are on their way. Puts go through
:class:`~exactbatch.adapters.jax_put.Putter`: XLA's batched put, checked
against ``jax.device_put`` (a tenth of its cost per array), else
``jax.device_put`` itself; the arrays are ``jax.device_put``'s either way
(uncommitted on JAX's default device when neither ``device`` nor
``sharding`` is given). On a CPU device the "move" is at most a copy, and
none for memory that starts on a 64-byte boundary, which XLA aliases: the
loader's batches (at a batch_size that is a multiple of 16) and a cast or
padded batch. The host arrays are never written after they are put: the
loader hands out fresh arrays that belong to the caller (it never reuses a
batch's arrays), a cast or a pad makes a fresh copy, and the iterator keeps
each host batch until its device batch is handed out, so a transfer (or a
zero-copy alias on a CPU device) reads memory nobody changes.

Resume: batches are put ahead through the loader's own look-ahead
(``peek()`` on its epoch's iterator): they are read, but the loader counts
a batch only when the iterator hands it to you. So ``state_dict()``, of
the ``JaxLoader`` or of the loader itself, counts exactly the batches you
got, and closing the iterator (``close()``, leaving a ``for`` loop by
``break``, or dropping it) gives the batches put ahead back to the loader,
which hands them out next (its own ``next_into``, say); the next
``iter()`` is the next epoch, as after leaving a loader's own loop. A read
that raises leaves the iterator as the loader's own does: the next
``next()`` reads the same batches again.

jax is imported when a function here first needs it, never at import.
"""

from __future__ import annotations

import weakref
from collections import deque
from collections.abc import Callable
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeAlias

import numpy as np

from exactbatch.adapters.jax_put import Putter, Target
from exactbatch.arrays import batch_pair
from exactbatch.checks import check_flag, check_int
from exactbatch.extras import need
from exactbatch.hints import Device, DTypeLike
from exactbatch.loader import DataLoader
from exactbatch.loader.epoch_iterator import EpochIterator
from exactbatch.prefetch import MAX_DEPTH

if TYPE_CHECKING:
    import jax
    from jax.sharding import Sharding

__all__ = ["JaxLoader", "as_jax"]

# A batch handed out: the features, the labels (jax.Array s), the row ids (NumPy, on the
# host: with_rows), the mask (pad_last, or a loader of even_batches="pad")
Handed: TypeAlias = "jax.Array | np.ndarray"  # one array of it
Put = tuple[Handed, ...]
Host = tuple[np.ndarray, ...]  # the same batch's arrays on the host
Putters = tuple[Putter, ...]  # of x and y, and of the mask
JaxDevice: TypeAlias = "jax.Device"  # (where a function's local jax is the module)


def _jax() -> ModuleType:
    return need("jax", by="exactbatch.jax", package="JAX", extra="jax")


def _row_pieces(sharding: Sharding) -> int:
    """How many pieces ``sharding`` cuts a batch's rows (axis 0) into."""
    m = len(sharding.device_set)
    try:
        return m // sharding.shard_shape((m, 1))[0]
    except (ValueError, TypeError, IndexError):  # a sharding that does not cut rows only
        return m


def _mask_sharding(sharding: Sharding) -> Sharding:
    """The sharding for the 1-D mask: the rows' part of a NamedSharding's spec."""
    jax = _jax()
    if isinstance(sharding, jax.sharding.NamedSharding) and len(sharding.spec) > 1:
        rows: Sharding = jax.sharding.NamedSharding(
            sharding.mesh, jax.sharding.PartitionSpec(*sharding.spec[:1])
        )
        return rows
    return sharding


def _resolve_dtype(dtype: DTypeLike, loader: DataLoader) -> np.dtype:
    """The dtype batches are put as: ``dtype``, else the loader's (float32 without x64)."""
    jax = _jax()
    x64 = bool(jax.config.jax_enable_x64)
    if dtype is None:
        want = np.dtype(getattr(loader, "dtype", np.float64))
        return np.dtype(np.float32) if want == np.float64 and not x64 else want
    try:
        want = np.dtype(dtype)
    except TypeError as e:
        raise TypeError(f"dtype must be a floating dtype such as jnp.float32; got {dtype!r}") from e
    # jnp.bfloat16 (and JAX's other ml_dtypes floats) are floating to JAX, not to NumPy:
    # handed out as such, cast from the loader's dtype in the copy to the host batch
    if not (np.issubdtype(want, np.floating) or jax.numpy.issubdtype(want, jax.numpy.floating)):
        raise TypeError(f"dtype must be a floating dtype such as jnp.float32; got {dtype!r}")
    if want == np.float64 and not x64:
        raise ValueError(
            "dtype=float64 needs 64-bit JAX: set jax.config.update('jax_enable_x64', True) "
            "first (without it JAX holds float32 only), or pass dtype=jnp.float32"
        )
    return want


class JaxLoader:
    """An epoch-per-``iter()`` iterable of ``(xb, yb)`` (or ``(xb, yb, mask)``)
    ``jax.Array`` s; see :func:`as_jax`.

    Attributes: ``loader`` (the wrapped loader), ``dtype`` (a NumPy dtype, as
    resolved when made), ``device``, ``sharding``, ``prefetch`` and
    ``pad_last``. ``len()`` is ``len(loader)``, the batches per epoch.
    """

    device: jax.Device | None
    sharding: Sharding | None

    def __init__(
        self,
        loader: DataLoader,
        *,
        dtype: Any = None,
        device: Device = None,
        sharding: Any = None,
        prefetch: int = 2,
        pad_last: bool = False,
    ) -> None:
        jax = _jax()
        missing = [
            a
            for a in ("__iter__", "batch_size", "state_dict", "load_state_dict")
            if not hasattr(loader, a)
        ]
        if missing:
            raise TypeError(
                f"as_jax needs an exactbatch DataLoader; got {type(loader).__name__} "
                f"(no {', '.join(missing)})"
            )
        self.loader = loader
        self.prefetch = check_int("prefetch", prefetch, 0, maximum=MAX_DEPTH)
        self.pad_last = check_flag("pad_last", pad_last)
        # a loader of even_batches="pad" hands out full batches and their masks: put those
        self._padded = getattr(loader, "even_batches", False) == "pad"
        self._masked = self.pad_last or self._padded  # batches carry a mask
        self.dtype = _resolve_dtype(dtype, loader)
        if device is not None and sharding is not None:
            raise ValueError("pass device= or sharding=, not both (a sharding names its devices)")
        if device is not None and not isinstance(device, jax.Device):
            raise TypeError(f"device must be a jax.Device such as jax.devices()[0]; got {device!r}")
        if sharding is not None and not isinstance(sharding, jax.sharding.Sharding):
            raise TypeError(
                f"sharding must be a jax.sharding.Sharding (e.g. a NamedSharding over a "
                f"Mesh); got {sharding!r}"
            )
        self.device, self.sharding = device, sharding
        self._pieces = 1 if sharding is None else _row_pieces(sharding)
        b = loader.batch_size
        if b % self._pieces:
            raise ValueError(
                f"batch_size={b} does not divide evenly over the sharding's {self._pieces} "
                f"devices: pass a batch_size that is a multiple of {self._pieces}"
            )
        last = _partial_rows(loader)
        if last and not self.pad_last and last % self._pieces:
            raise ValueError(
                f"the loader's last batch has {last} rows, which do not divide evenly over "
                f"the sharding's {self._pieces} devices: pass pad_last=True (or drop_last=True "
                f"to the DataLoader)"
            )
        # the putters and what they put onto
        self._putter_key: tuple[Sharding, Sharding] | None = None
        self._put_with: Putters | None = None
        # the epoch in progress: a weak reference (dropping it closes it)
        self._epoch: Callable[[], _JaxEpoch | None] = _dead

    def __len__(self) -> int:
        return len(self.loader)

    def __repr__(self) -> str:
        where = self.sharding if self.sharding is not None else self.device
        return (
            f"JaxLoader({self.loader!r}, dtype={self.dtype}, on={where}, "
            f"prefetch={self.prefetch}, pad_last={self.pad_last})"
        )

    def __iter__(self) -> _JaxEpoch:
        older = self._epoch()
        if older is not None:
            older.close()  # an older epoch gives its batches back first
        epoch = _JaxEpoch(self)
        self._epoch = weakref.ref(epoch)
        return epoch

    def state_dict(self) -> dict[str, Any]:
        """The loader's state: it counts only the batches handed out, not those put
        on the device ahead (``prefetch``), which a loader restored from it hands out."""
        return self.loader.state_dict()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume the loader from a :meth:`state_dict`; an epoch in progress is dropped."""
        epoch = self._epoch()
        if epoch is not None:
            epoch.close()
        self.loader.load_state_dict(state)

    # -- one batch to the device ----------------------------------------------------

    def _putters(self) -> Putters:
        """Putters of x and y, and of the mask: onto ``sharding``, else one device
        (``device``, else JAX's default device as ``jax.device_put`` picks it now,
        the arrays left uncommitted as it leaves them); kept while that holds."""
        jax = _jax()
        if self.sharding is not None:
            key = (self.sharding, _mask_sharding(self.sharding))
            targets: tuple[Target, Target] = key
        else:
            one = self.device if self.device is not None else _default_device()
            key = (jax.sharding.SingleDeviceSharding(one),) * 2
            targets = (self.device,) * 2
        if self._putter_key != key:
            self._putter_key = key
            self._put_with = tuple(Putter(t, s) for t, s in zip(targets, key, strict=True))
        assert self._put_with is not None  # (made with its key)
        return self._put_with

    def host_pair(
        self, xb: np.ndarray, yb: np.ndarray, rows_to: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """``xb, yb`` in this dtype with ``rows_to`` rows (zeros below), copied only
        if needed (into memory aligned so that a CPU device aliases it, not copies it).
        Class labels (``DataLoader(label_dtype=...)``) stay integers: int32 as they
        are, int64 as int32 without 64-bit JAX (which holds no int64)."""
        yt = self.dtype
        if yb.dtype.kind == "i":
            keep = yb.dtype == np.int32 or _jax().config.jax_enable_x64
            yt = yb.dtype if keep else np.dtype(np.int32)
        if xb.shape[0] == rows_to and xb.dtype == self.dtype and yb.dtype == yt:
            return xb, yb
        out = batch_pair(rows_to, xb.shape[1], yb.shape[1], self.dtype, yt)
        for a, o in zip((xb, yb), out, strict=True):
            o[: a.shape[0]] = a
            o[a.shape[0] :] = 0
        if yt != yb.dtype and yt == np.int32 and (out[1][: yb.shape[0]] != yb).any():
            raise ValueError(
                "label_dtype=int64 labels beyond int32's range, which JAX without "
                "jax_enable_x64 cannot hold: enable x64, or use smaller class ids"
            )
        return out

    def _put(
        self, batch: tuple[np.ndarray, ...], to: Putters, ones: jax.Array | None
    ) -> tuple[Host, Put]:
        """``(host arrays, device arrays)`` of one batch ``(xb, yb)`` (or ``(xb, yb,
        ids)``: the ids stay on the host, a new NumPy int64 array, padded with -1)
        put by ``to`` (the putters of x and y, and of the mask); the device put is
        asynchronous. A batch of a loader of ``even_batches="pad"`` ends in its bool
        mask, put as the mask of ``pad_last`` is."""
        given = None
        if self._padded:
            batch, given = batch[:-1], batch[-1]
        if len(batch) == 2:
            return self._put_pair(*batch, to, ones, given)
        xb, yb, ids = batch
        host, put = self._put_pair(xb, yb, to, ones, given)
        if self._masked and len(ids) < self.loader.batch_size:
            ids = np.concatenate((ids, np.full(self.loader.batch_size - len(ids), -1, ids.dtype)))
        # (x, y, ids, then the mask with pad_last: the loader's batch, then what pads it)
        return (*host[:2], ids, *host[2:]), (*put[:2], ids, *put[2:])

    def _put_pair(
        self,
        xb: np.ndarray,
        yb: np.ndarray,
        to: Putters,
        ones: jax.Array | None,
        given: np.ndarray | None = None,
    ) -> tuple[Host, Put]:
        rows, b = xb.shape[0], self.loader.batch_size
        if rows % self._pieces and not self._masked:
            raise ValueError(
                f"a batch of {rows} rows does not divide evenly over the sharding's "
                f"{self._pieces} devices: pass pad_last=True (or drop_last=True to the DataLoader)"
            )
        host = self.host_pair(xb, yb, b if self._masked else rows)
        put = to[0](host)
        if not self._masked:
            return host, put
        if given is not None:  # the loader's own mask (even_batches="pad")
            rows = int(given.sum())  # its real rows come first
        if rows == b:
            assert ones is not None  # (made for every epoch of masked batches)
            return host, (*put, ones)
        mask = np.zeros(b, dtype=self.dtype)
        mask[:rows] = 1.0
        return (*host, mask), (*put, *to[1]((mask,)))


def _default_device() -> JaxDevice:
    """The device ``jax.device_put(x)`` puts ``x`` on: ``jax_default_device`` (a device
    or a platform's name) where set, else the first local device."""
    jax = _jax()
    default = jax.config.jax_default_device
    if isinstance(default, str):
        default = jax.local_devices(backend=default)[0]
    device: JaxDevice = default if default is not None else jax.local_devices()[0]
    return device


def _dead() -> None:
    return None


def _partial_rows(loader: DataLoader) -> int:
    """Rows of the loader's last, partial batch (0 when none, or when unknown)."""
    n: int | None = getattr(loader, "n", None)
    b = loader.batch_size
    if n is None or getattr(loader, "drop_last", False):
        return 0
    if getattr(loader, "even_batches", False) == "pad":  # every batch full, padded
        return 0
    return n % b


class _JaxEpoch:
    """One epoch of a :class:`JaxLoader`: the loader's iterator reads ``prefetch``
    batches ahead of the one handed out (``peek``), and those are put on the device
    at once; the loader counts each when it is handed out."""

    def __init__(self, owner: JaxLoader) -> None:
        self.owner = owner
        self.it: EpochIterator | None = iter(owner.loader)
        if not hasattr(self.it, "peek"):
            raise TypeError(
                f"as_jax needs an exactbatch DataLoader, whose iterator reads ahead with "
                f"peek(); got {type(owner.loader).__name__}"
            )
        # (loader's x, host arrays, device arrays), in peek() order
        self.ahead: deque[tuple[np.ndarray, Host, Put]] = deque()
        self.to = owner._putters()  # the default device is resolved once an epoch
        self.ones: jax.Array | None = None
        if owner._masked:  # one device mask for every full batch (jax arrays are immutable)
            mask = np.ones(owner.loader.batch_size, dtype=owner.dtype)
            (self.ones,) = self.to[1]((mask,))

    def __iter__(self) -> _JaxEpoch:
        return self

    def __next__(self) -> Put:
        it, ahead, owner = self.it, self.ahead, self.owner
        if it is None:
            raise StopIteration
        if len(ahead) <= owner.prefetch:  # put what the loader reads ahead, in order
            for batch in it.peek(owner.prefetch + 1)[len(ahead) :]:
                ahead.append((batch[0], *owner._put(batch, self.to, self.ones)))
        try:
            xb = next(it)[0]  # the batch put first: handed out, the loader counts it now
        except StopIteration:
            self.close()
            raise
        got, _, put = ahead.popleft()
        if got is not xb:  # pragma: no cover - peek() and next() disagree: never
            raise RuntimeError("as_jax: the loader handed out another batch than it read ahead")
        return put

    def close(self) -> None:
        """Stop; the batches put ahead and not handed out go back to the loader."""
        it, self.it = self.it, None
        self.ahead.clear()
        if it is not None:
            it.close()


def as_jax(
    loader: DataLoader,
    *,
    dtype: Any = None,
    device: Device = None,
    sharding: Any = None,
    prefetch: int = 2,
    pad_last: bool = False,
) -> JaxLoader:
    """Wrap an exactbatch ``DataLoader`` to yield ``jax.Array`` s, moved to the device ahead.

    Each ``iter()`` is one epoch of ``loader``; ``len()`` is ``len(loader)``.
    Batches are ``(xb, yb)`` of shapes (rows, d) and (rows, l) (labels stay
    2-D, like the loader's), the loader's rows in the loader's order. Class
    labels (``DataLoader(..., label_dtype=np.int32)``) stay integers; int64
    ones become int32 without ``jax_enable_x64`` (checked: one beyond int32 is a
    ``ValueError``). ``dtype`` is the features' dtype.

    * ``dtype``: a floating dtype (``jnp.float32``, ``np.float64``, "float32",
      ``jnp.bfloat16``: cast on the host as the batch is copied for the put).
      ``None``: the loader's dtype (``getattr(loader, "dtype", float64)``),
      except that float64 becomes float32 when 64-bit JAX is off (JAX's
      default: ``jax_enable_x64`` false) - JAX would make it float32 anyway;
      here the cast is done on the host, so half the bytes move. An explicit
      float64 without ``jax_enable_x64`` is a ``ValueError``. The dtype is
      resolved when ``as_jax`` is called; casts happen only when it differs
      from the batch's.
    * ``device``: a ``jax.Device`` (default: JAX's default device).
    * ``sharding``: a ``jax.sharding.Sharding`` (say ``NamedSharding(mesh,
      PartitionSpec("batch"))``) laying each batch's rows out over its
      devices. ``batch_size`` must divide evenly over them (``ValueError``
      naming both numbers), and so must a partial last batch unless
      ``pad_last=True``. Not with ``device``.
    * ``prefetch``: batches put on the device ahead of the one handed out
      (an int >= 0; 0: each batch is put when asked for). Puts are
      asynchronous, so the copies overlap your step. For speed, give the
      loader ``dtype=np.float32`` (no cast here) and a ``batch_size`` that
      is a multiple of 16 (a CPU device then aliases the batches).
    * ``pad_last=True``: every batch has exactly ``batch_size`` rows and a
      third element ``mask`` of shape (batch_size,): 1.0 for real rows, 0.0
      for padding (padded rows are zeros), so a jitted step sees one shape
      and no row is dropped. Weigh the per-row loss by it.
    * A loader built with ``even_batches="pad"`` hands out full batches with a
      bool mask already (and whole padding batches where its shard has fewer
      real batches than the largest): its batches come as ``pad_last=True``'s,
      ``(xb, yb, mask)`` with the mask 1.0/0.0 in ``dtype``, whatever
      ``pad_last`` says; so every rank runs ``len()`` steps of one shape, and
      a masked metric summed over the ranks is the whole data's.
    * A loader built with ``with_rows=True`` gives ``(xb, yb, rows)`` (and
      ``(xb, yb, rows, mask)`` with ``pad_last``): ``rows`` the batch's global
      row ids as the loader hands them out, a NumPy int64 array on the host
      (64-bit ids survive whether or not ``jax_enable_x64`` is on; padded
      rows have id -1). ``jnp.asarray(rows)`` puts them on a device.

    ``state_dict()`` counts only the batches handed out (not those put
    ahead) and ``load_state_dict()`` resumes the loader; see the module's
    notes. ``TypeError`` for a non-loader; ``prefetch`` must be an int >= 0.
    """
    return JaxLoader(
        loader, dtype=dtype, device=device, sharding=sharding, prefetch=prefetch, pad_last=pad_last
    )
